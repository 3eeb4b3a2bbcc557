"""Celery settings of the docsvault workers, read by ``celery -A dagster_celery.app worker`` (dagster-celery imports a
module of this name when it is on PYTHONPATH). The same values as the run process's executor: both come from
:func:`pipeline.distributed.celery_settings` (env DOCSVAULT_CELERY_BROKER, DOCSVAULT_CELERY_BACKEND,
DOCSVAULT_CELERY_VISIBILITY_TIMEOUT). Before each task, a worker whose sources file changed since it loaded the
definitions loads them again (:func:`pipeline.distributed.reload_definitions_if_sources_changed`). The lines a
step prints keep Dagster's level instead of Celery's WARNING (:func:`pipeline.distributed.quiet_worker_output`)."""

from celery.signals import task_prerun as _task_prerun

from pipeline.distributed import celery_settings
from pipeline.distributed import quiet_worker_output as _quiet_worker_output
from pipeline.distributed import reload_definitions_if_sources_changed as _reload_if_sources_changed

globals().update(celery_settings())
_task_prerun.connect(_reload_if_sources_changed, weak=False)
_quiet_worker_output()          # Dagster's DEBUG/INFO lines at their level, not as Celery's WARNING
