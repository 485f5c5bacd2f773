"""Planning helpers of the envs' experts: value iteration over a transition table (the optimal policy of
gymnasium's toy-text games) and breadth-first distances."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Iterable

import numpy as np

#: discount of the expert's value iteration (close to 1: the most likely way to the goal, then the shortest)
EXPERT_GAMMA = 0.99


def optimal_policy(table: dict[int, dict[int, list]], n_actions: int, *, gamma: float = EXPERT_GAMMA,
                   tol: float = 1e-9, max_iter: int = 100_000) -> list[int]:
    """The greedy action per state after value iteration on a gymnasium toy-text transition table
    ``P[state][action] = [(prob, next_state, reward, terminated), ...]``; ties go to the lowest action."""
    n = max(table) + 1
    trans = np.zeros((n, n_actions, n))  # probability of reaching a non-terminal next state
    reward = np.zeros((n, n_actions))  # expected immediate reward
    for s, acts in table.items():
        for a, outs in acts.items():
            for p, nxt, r, done in outs:
                reward[s, a] += p * r
                if not done:
                    trans[s, a, nxt] += p
    value = np.zeros(n)
    for _ in range(max_iter):
        q = reward + gamma * trans @ value
        new = q.max(axis=1)
        if np.max(np.abs(new - value)) < tol:
            value = new
            break
        value = new
    q = reward + gamma * trans @ value
    return [int(np.flatnonzero(row >= row.max() - 1e-9)[0]) for row in q]



def bfs(sources: Iterable[Hashable], neighbours: Callable[[Hashable], list]) -> dict:
    """Fewest moves between every reachable node and the nearest source (moves are symmetric here)."""
    dist = {g: 0 for g in sources}
    queue = deque(dist)
    while queue:
        cur = queue.popleft()
        for n in neighbours(cur):
            if n not in dist:
                dist[n] = dist[cur] + 1
                queue.append(n)
    return dist


__all__ = ["EXPERT_GAMMA", "bfs", "optimal_policy"]
