"""InterPodAffinity: required and preferred inter-pod affinity and anti-affinity."""
from schedmesh.plugins.inter_pod_affinity.plugin import InterPodAffinity, InterPodAffinityArgs

__all__ = ["InterPodAffinity", "InterPodAffinityArgs"]
