"""TaintToleration plugin and kube's taint/toleration matching helpers."""
from schedmesh.plugins.taint_toleration.plugin import ERR_REASON_UNTOLERATED, TaintToleration
from schedmesh.plugins.taint_toleration.tolerations import (
    UNSCHEDULABLE_TAINT, count_intolerable_prefer_no_schedule, do_not_schedule_taints_filter,
    find_matching_untolerated_taint, prefer_no_schedule_tolerations, toleration_tolerates_taint,
    tolerations_tolerate_taint, untolerated_groups)

__all__ = ["TaintToleration", "ERR_REASON_UNTOLERATED", "UNSCHEDULABLE_TAINT", "count_intolerable_prefer_no_schedule",
           "do_not_schedule_taints_filter", "find_matching_untolerated_taint", "prefer_no_schedule_tolerations",
           "toleration_tolerates_taint", "tolerations_tolerate_taint", "untolerated_groups"]
