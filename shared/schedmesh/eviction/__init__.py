"""Eviction logic, as pure functions and clock-injected state (no I/O):

* `disruption`: a PodDisruptionBudget's status (kube-controller-manager's disruption controller);
* `eviction_api`: kube-apiserver's answer to a pod eviction request;
* `taint_eviction`: NoExecute taint-based deletion and the tolerations pods get by default;
* `node_lifecycle`: node conditions and taints from the kubelet's heartbeats;
* `node_pressure`: the kubelet's node-pressure eviction manager over a usage model;
* `usage`: the `schedmesh.io/simulated-usage` annotation; `qos`: a pod's QoS class.
"""
