"""Celery settings of the docsvault workers, read by ``celery -A dagster_celery.app worker`` (dagster-celery imports a
module of this name when it is on PYTHONPATH). The same values as the run process's executor: both come from
:func:`pipeline.distributed.celery_settings` (env DOCSVAULT_CELERY_BROKER, DOCSVAULT_CELERY_BACKEND,
DOCSVAULT_CELERY_VISIBILITY_TIMEOUT)."""

from pipeline.distributed import celery_settings

globals().update(celery_settings())
