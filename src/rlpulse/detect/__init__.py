"""Detection: pure functions of the logged steps, used live and in replay. Statistics of RL
dynamics per logged step (``signals``), which the generated rules only threshold, and where a
failure began with the last good step and checkpoint (``lastgood``)."""
