"""Reports of runs: JSON/markdown, static HTML, exports of the best prompts."""
