"""The lagsched page in Airflow's UI: a FastAPI app the ``lagsched_plugin`` mounts at ``/lagsched``.

`lagsched.ui.app.create_app` builds it; docs/ui.md is the tour.
"""
