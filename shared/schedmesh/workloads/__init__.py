"""What kube's pod controllers decide, as plain functions over api.types objects: one copy used by
`schedmesh explain` and by the mesh's controller-manager (schedmesh.mesh.controllers).

* `daemonset`: the DaemonSet controller (pkg/controller/daemon): which nodes run a daemon pod,
  the pod it makes for a node, and what one sync creates and deletes.
* `replicas`: what the controllers of replicated workloads share (controller_utils): a
  workload's pods, the pod made from its template and its name, which extra pods go first.
* `replicaset`, `statefulset`, `job`: one sync of a ReplicaSet or ReplicationController (a
  Deployment's pods are its ReplicaSet's), a StatefulSet, a Job.
"""
