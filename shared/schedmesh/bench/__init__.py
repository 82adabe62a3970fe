"""Benchmark workloads (after kube-scheduler's scheduler_perf) and the in-process cycle benchmark."""
