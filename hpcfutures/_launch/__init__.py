"""A process's part in a launch: its role decided (:mod:`.roles`,
:mod:`.session`) and played (client, scheduler, worker, or serving).

The launcher plug-ins (:mod:`hpcfutures.launchers`) answer "who am I?" and
"where is the scheduler?"; this package turns those answers into a running
role and ends it when the client is done.
"""
