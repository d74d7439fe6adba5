"""Tasks synthesized from a repository with tests: history mining and bug injection, validated in sandboxes."""
