"""Helpers shared by several plugins (kube-scheduler's framework/plugins/helper): score
normalisation and Go's arithmetic, reproduced exactly."""
