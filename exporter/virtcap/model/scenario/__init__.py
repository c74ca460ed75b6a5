"""What-if scenarios: the fleet changed on paper (hypervisors added, removed or drained, policies
changed, demand placed), pure and typed; fleet/scenario.py computes the answers before and after."""
