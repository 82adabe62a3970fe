"""Preemption: which pods to evict so that an unschedulable pod fits (kube-scheduler v1.35's
framework/preemption and DefaultPreemption's policy). Decisions only; eviction is the caller's."""
from schedmesh.preemption.candidates import (Candidate, Victims, earliest_pod_start_time, more_important_pod,
                                             pick_one_node_for_preemption)
from schedmesh.preemption.default_policy import (ERR_NO_VICTIMS, MSG_PREEMPTION_POLICY_NEVER,
                                                 MSG_TERMINATING_ON_NOMINATED, DefaultPreemptionPolicy,
                                                 pod_terminating_by_preemption)
from schedmesh.preemption.evaluator import (MSG_NO_CANDIDATE, MSG_NOT_HELPFUL, Evaluator, PreemptionDecision,
                                            PreemptionOutcome, PreemptionPolicy)
from schedmesh.preemption.pdb import filter_pods_with_pdb_violation

__all__ = ["Candidate", "Victims", "earliest_pod_start_time", "more_important_pod", "pick_one_node_for_preemption",
           "ERR_NO_VICTIMS", "MSG_PREEMPTION_POLICY_NEVER", "MSG_TERMINATING_ON_NOMINATED", "DefaultPreemptionPolicy",
           "pod_terminating_by_preemption", "MSG_NO_CANDIDATE", "MSG_NOT_HELPFUL", "Evaluator", "PreemptionDecision",
           "PreemptionOutcome", "PreemptionPolicy", "filter_pods_with_pdb_violation"]
