"""NodeAffinity plugin and the reusable node selector matcher (matcher.py)."""
from schedmesh.plugins.node_affinity.matcher import (NodeSelectorMatcher, PreferredTerms, RequiredNodeAffinity,
                                                     compile_node_selector, compile_preferred_terms,
                                                     pod_preferred_terms, required_node_affinity)
from schedmesh.plugins.node_affinity.plugin import (ERR_REASON_CONFLICT, ERR_REASON_ENFORCED, ERR_REASON_POD,
                                                    NodeAffinity)

__all__ = ["NodeAffinity", "ERR_REASON_POD", "ERR_REASON_ENFORCED", "ERR_REASON_CONFLICT", "NodeSelectorMatcher",
           "PreferredTerms", "RequiredNodeAffinity", "compile_node_selector", "compile_preferred_terms",
           "pod_preferred_terms", "required_node_affinity"]
