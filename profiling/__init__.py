"""Run workloads under Nsight Systems and collect traces, run records and unprofiled throughput."""
