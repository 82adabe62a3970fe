"""kube-scheduler's volume plugins, reduced to a cluster without storage objects.

schedmesh has no PersistentVolumes, PersistentVolumeClaims, StorageClasses or CSI nodes:
volume scheduling is out of scope. These plugins keep the default profile's names and give
exactly kube-scheduler's answers for what schedmesh can see:

* a pod without PVC-backed volumes: every volume plugin skips (as kube's do);
* a pod that references a PersistentVolumeClaim (or a generic ephemeral volume): the claim
  cannot exist here, so VolumeRestrictions' PreFilter rejects it as kube does for a missing
  claim: UnschedulableAndUnresolvable `persistentvolumeclaim "NAME" not found`.
"""
from schedmesh.plugins.volumes.plugins import NodeVolumeLimits, VolumeBinding, VolumeRestrictions, VolumeZone

__all__ = ["VolumeRestrictions", "NodeVolumeLimits", "VolumeBinding", "VolumeZone"]
