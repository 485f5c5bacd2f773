"""Playing episodes and measuring them: rollout, episode store, statistics, Ray scale-out."""
