"""ROC's half of soap-shard (Jia thesis ch. 4): vertex partitions of GNN training steps."""
