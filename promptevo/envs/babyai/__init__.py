"""BabyAI as a text game, exactly as BALROG renders it (levels, egocentric view, text env, bot)."""
