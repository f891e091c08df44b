"""The Kubernetes objects as text: each read back through its model (Kubeflow's, or the Kubernetes client's) so a
key the model would drop is an error, and the list dumped as one YAML stream as kubectl prints it."""

import yaml


def through(model, body: dict) -> dict:
    """`body` as its model reads it back (with the defaults the model fills in, such as a port's protocol): types
    checked, and a key the model does not know is an error (the models would drop it silently)."""
    read = model.from_dict(body).to_dict()
    dropped = _dropped(body, read)
    if dropped is not None:
        raise ValueError(f"{body['kind']}: {model.__name__} does not keep {dropped}")
    return read


def _dropped(given, read, path: str = "") -> str | None:
    """The first part of `given` that `read` lost or changed (keys `read` adds are defaults, not losses)."""
    if isinstance(given, dict) and isinstance(read, dict):
        for key, value in given.items():
            lost = f"{path}{key}" if key not in read else _dropped(value, read[key], f"{path}{key}.")
            if lost is not None:
                return lost
        return None
    if isinstance(given, list) and isinstance(read, list) and len(given) == len(read):
        pairs = enumerate(zip(given, read, strict=True))
        return next((lost for i, pair in pairs if (lost := _dropped(*pair, f"{path}{i}."))), None)
    return None if given == read else path.rstrip(".") or "the object"


class _Dumper(yaml.SafeDumper):
    """Block style for text of several lines: the ConfigMap's config.yaml reads as the file it is."""


_Dumper.add_representer(
    str,
    lambda dumper, text: dumper.represent_scalar("tag:yaml.org,2002:str", text, style="|" if "\n" in text else None),
)


def dump(objects: list[dict]) -> str:
    """The objects as one YAML stream, each with apiVersion, kind and metadata first as kubectl prints them."""
    first = ("apiVersion", "kind", "metadata")
    ordered = [
        {**{k: o[k] for k in first if k in o}, **{k: v for k, v in o.items() if k not in first}} for o in objects
    ]
    return yaml.dump_all(ordered, Dumper=_Dumper, sort_keys=False, width=120)
