"""The operator's Spark local dir: its scratch folder, unless the deployment chose one."""

from __future__ import annotations

from pathlib import Path

from lagsched.airflow.operators import spark_local_dir_chosen


def test_a_local_dir_in_spark_defaults_is_the_deployments_choice(tmp_path: Path) -> None:
    conf = tmp_path / "spark-defaults.conf"
    conf.write_text("# spark.local.dir /commented-out\nspark.ui.enabled false\n")
    assert not spark_local_dir_chosen({"SPARK_CONF_DIR": str(tmp_path)}, {})
    conf.write_text("spark.ui.enabled false\nspark.local.dir   /mnt/fast-disk\n")
    assert spark_local_dir_chosen({"SPARK_CONF_DIR": str(tmp_path)}, {})
    # Without SPARK_CONF_DIR, SPARK_HOME/conf holds it.
    (tmp_path / "conf").mkdir()
    conf.rename(tmp_path / "conf" / "spark-defaults.conf")
    assert spark_local_dir_chosen({"SPARK_HOME": str(tmp_path)}, {})
    assert not spark_local_dir_chosen({"SPARK_HOME": str(tmp_path / "elsewhere")}, {})
    # Java properties: "=" and ":" separate the key too.
    for line in ("spark.local.dir=/mnt/fast-disk", "  spark.local.dir: /mnt/fast-disk"):
        (tmp_path / "conf" / "spark-defaults.conf").write_text(line + "\n")
        assert spark_local_dir_chosen({"SPARK_HOME": str(tmp_path)}, {}), line
    (tmp_path / "conf" / "spark-defaults.conf").write_text("spark.local.dirs.other /x\n#spark.local.dir /y\n")
    assert not spark_local_dir_chosen({"SPARK_HOME": str(tmp_path)}, {})


def test_an_empty_spark_local_dirs_is_no_choice() -> None:
    assert not spark_local_dir_chosen({"SPARK_LOCAL_DIRS": ""}, {})
