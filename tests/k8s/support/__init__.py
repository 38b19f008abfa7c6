"""Helpers of the Kubernetes tests only (README.md): the control plane, the local
kubelet, the in-cluster client and the topic helpers."""
