"""launcher=kubernetes: the plan as Kubernetes objects (a TrainJob, or a JobSet when vLLM has pods of its own).

    config.py      launcher.kubernetes.*: its options, their types and values (the config reads only this module)
    launcher.py    the launcher protocol (launchers/__init__.py)
    manifests.py   the objects the plan becomes, through Kubeflow's models
    admission.py   what Kubernetes would refuse, found offline: names, GPUs, schemas, kubectl's dry run
    cluster.py     action=run: kubectl apply, follow the job's conditions, delete on Ctrl-C
    yaml_text.py   the objects as one YAML stream, each read back through its model first

Nothing here is imported until a run chooses launcher=kubernetes, except config.py.
"""
