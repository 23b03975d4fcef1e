"""The multi-turn loop of agent tasks, run between rollout iterations.

When a model turn of an agent episode ends, the environment reads the turn: a tool call
is executed and its result goes back into the trajectory as a `tool` message plus the
next assistant header (tokens with action mask 0, so they never enter the loss), and
the trajectory is unfinished again, so the next iteration generates the next turn; a
turn without a tool call is the final answer. An episode also ends at the turn limit,
or when the next turn would not fit in the engine's context.

Because the environment state lives in the trajectory (plain JSON), episodes continue
across partial-rollout iterations and checkpoints like single-turn responses do.
"""

from __future__ import annotations

from posttrain.config.verifiers import verifier_facts
from posttrain.data import builtin_env
from posttrain.data.chat import tool_turn_ids
from posttrain.rollout.queue import PartialRolloutQueue, Trajectory

MIN_TURN_ROOM = 4  # fewer free tokens than this after a tool message ends the episode


class AgentLoop:
    def __init__(self, tokenizer, max_model_len: int):
        from posttrain.rollout.env_workers import EnvEpisodes

        self.tokenizer, self.max_model_len = tokenizer, max_model_len
        self.envs = EnvEpisodes(tokenizer, max_model_len, MIN_TURN_ROOM)  # your own environments (`env` tasks)

    def advance(self, queue: PartialRolloutQueue, trajs: list[Trajectory], version: int) -> int:
        """Let the environment answer every agent turn that just ended; returns how many
        episodes continue."""
        continued = 0
        for traj in trajs:
            task = queue.task_of(traj)
            if verifier_facts(task.verifier).episode == "agent" and traj.finished and not (traj.env or {}).get("done"):
                try:
                    continued += self.turn_ended(traj, task.entry, version)
                except Exception as exc:  # a broken task or environment ends its episode, flagged
                    traj.finish_reason = "env_error"
                    traj.env = {**(traj.env or {}), "done": True, "error": f"{type(exc).__name__}: {exc}"}
        return continued + self.envs.advance(queue, trajs, version, tool_turn_ids)

    def turn_ended(self, traj: Trajectory, entry: dict, version: int) -> bool:
        state = builtin_env.EnvState.from_dict(traj.env) if traj.env else builtin_env.initial_state(entry)
        text = self.tokenizer.decode(traj.last_turn(), skip_special_tokens=True)
        reply = builtin_env.step(state, text, entry.get("corpus_seed", 0)) if traj.finish_reason == "stop" else None
        if traj.finish_reason != "stop":  # cut by max_tokens: no final answer
            state.turns += 1
        continues = False
        if reply is not None:
            ids = tool_turn_ids(self.tokenizer, reply)
            room = self.max_model_len - len(traj.prompt_ids) - len(traj.response_ids) - len(ids)
            if state.turns >= entry.get("max_turns", 4):
                traj.finish_reason = "max_turns"
            elif room < MIN_TURN_ROOM or traj.model_tokens >= traj.max_tokens:
                traj.finish_reason = "length"
            else:
                traj.add_observation(ids, version)
                continues = True
        env = state.to_dict()
        env["done"] = not continues
        traj.env = env
        return continues
