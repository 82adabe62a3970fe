"""PodTopologySpread (kube-scheduler's podtopologyspread plugin, v1.35)."""
from schedmesh.plugins.pod_topology_spread.common import (NO_SELECTOR_SOURCES, SELECTOR_SOURCES_SERVICE, NotFound,
                                                          SelectorSources, StaticSelectorSources,
                                                          WorkloadSelectors, WorkloadSelectorSources)
from schedmesh.plugins.pod_topology_spread.filtering import (ERR_REASON_CONSTRAINTS_NOT_MATCH,
                                                             ERR_REASON_NODE_LABEL_NOT_MATCH)
from schedmesh.plugins.pod_topology_spread.plugin import PodTopologySpread

__all__ = ["PodTopologySpread", "ERR_REASON_CONSTRAINTS_NOT_MATCH", "ERR_REASON_NODE_LABEL_NOT_MATCH",
           "SelectorSources", "StaticSelectorSources", "WorkloadSelectors", "WorkloadSelectorSources", "NotFound", "NO_SELECTOR_SOURCES",
           "SELECTOR_SOURCES_SERVICE"]
