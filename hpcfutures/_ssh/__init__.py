"""Reaching a cluster from outside it, through the system's OpenSSH client.

::

    laptop                                    login node (sshd)          compute nodes
    ──────                                    ─────────────────          ─────────────
    ssh -M (one control master per target) ══ the one SSH connection
      ssh -S ctl ... /bin/sh -s  <script ──>  sbatch, squeue, scancel,
                                              cat of the 0600 scheduler file
      ssh -O forward -L 127.0.0.1:P:A:p ──>   sshd opens A:p ──────────> the job's scheduler
    Dask client -> tls://127.0.0.1:P          (TLS end to end; results come through the scheduler)

:mod:`.shell` builds the commands (pure, unit tested), :mod:`.openssh` runs
them (the master, commands with deadlines, forwards), :mod:`.cluster` is what
a cluster is asked (batch system, files, job scripts), :mod:`.serving` finds
a serving launch there and forwards its scheduler's port.
"""
