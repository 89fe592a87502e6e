"""The Spark route's own notice: MLflow's env_manager warning answered in one line of ours."""

import logging

from lakescore.scoring.spark import ENV_NOTE, _env_notice_answered

MLFLOW_WARNING = ('Calling `spark_udf()` with `env_manager="local"` does not recreate the same environment '
                  "that was used during training, which may lead to errors or inaccurate predictions.")


def test_mlflows_local_environment_warning_is_replaced_by_our_line(caplog, capsys):
    logger = logging.getLogger("mlflow.pyfunc")
    with caplog.at_level(logging.INFO, logger="mlflow.pyfunc"):
        with _env_notice_answered("local"):
            logger.warning(MLFLOW_WARNING)
            logger.info("Selected backend for flavor 'python_function'")
        logger.warning(MLFLOW_WARNING)  # outside the spark_udf call MLflow speaks for itself
    assert [r.getMessage()[:30] for r in caplog.records] == ["Selected backend for flavor 'p", MLFLOW_WARNING[:30]]
    assert capsys.readouterr().err == ENV_NOTE + "\n"


def test_a_virtualenv_route_keeps_mlflows_messages(caplog, capsys):
    with caplog.at_level(logging.WARNING, logger="mlflow.pyfunc"), _env_notice_answered("virtualenv"):
        logging.getLogger("mlflow.pyfunc").warning(MLFLOW_WARNING)
    assert [r.getMessage() for r in caplog.records] == [MLFLOW_WARNING]
    assert capsys.readouterr().err == ""
