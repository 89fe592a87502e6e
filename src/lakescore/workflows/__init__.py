"""Workflows: ``(project, runtime, *, options) -> result``, just under the CLI.

The only place that strings domain steps together and touches a
:class:`~lakescore.runtime.Runtime`: :mod:`~lakescore.workflows.train`,
:mod:`~lakescore.workflows.score`, :mod:`~lakescore.workflows.publish`,
:mod:`~lakescore.workflows.monitor`, :mod:`~lakescore.workflows.serve`,
:mod:`~lakescore.workflows.demo` and :mod:`~lakescore.workflows.preview`.
"""
