"""kube-controller-manager's controllers that act on the mesh, one module each, over one
ClusterCache replica (the controller-manager process, `python -m services.controller_manager`):

* `disruption`: PodDisruptionBudget status (pkg/controller/disruption);
* `node_lifecycle`: node health from the agents' heartbeats and TaintNodesByCondition
  (pkg/controller/nodelifecycle);
* `taint_eviction`: NoExecute taint-based deletion (pkg/controller/tainteviction);
* `daemonset`: DaemonSets' pods, one per eligible node (pkg/controller/daemon);
* `workloads`: the replicas of ReplicaSets (Deployments'), ReplicationControllers, StatefulSets and
  Jobs (pkg/controller/replicaset, replication, statefulset, job);
* `podcontrol`: the pod creation and deletion, expectations and garbage collection those two share;
* `pod_gc`: pods bound to nodes that no longer exist (pkg/controller/podgc, gcOrphaned);
* `policy`: the Eviction API, cordon and taint (schedmesh.v1.Policy, protos/schedmesh/v1/policy.proto);
* `manager`: the process wiring them together;
* `forwarding`: the queue-manager's side of schedmesh.v1.Policy, forwarding each call here.

The decisions are the eviction library's (schedmesh.eviction) and the pod controllers'
(schedmesh.workloads); these modules only feed them the cluster and publish what they decide.
"""
