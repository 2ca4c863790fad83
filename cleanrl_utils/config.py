"""`--config FILE`: a script's defaults from a file, the flags on the command line over them.

Three layouts are read:

    # a flat YAML file: field -> value, for any environment
    learning_rate: 0.0003
    total_timesteps: 1000000

    # a YAML file of sections, one per environment id (as RL Zoo keeps tuned hyperparameters); the section of the
    # run's --env-id is taken, and an id without a section is refused
    CartPole-v1:
      learning_rate: 0.00025
    Acrobot-v1:
      learning_rate: 0.0001

    # a run folder's args.json ({"script", "run_name", "args"}): the run's values, to start a new run like it
    # (its `resume` and `config` are not taken; --resume continues the run itself)

Field names are the script's Args fields, in snake_case (`learning_rate`) or as flags (`learning-rate`). A field the
script does not have, or a value of the wrong type, is refused with one line and exit code 2, before anything runs.
"""

import dataclasses
import difflib
import json
import types
import typing

import yaml

from cleanrl_utils.run_state import refuse

NOT_FROM_A_RUN = {"resume", "config"}  # an args.json's values that start a new run like it, not continue it


def load_config(args_class, path: str, env_id: str, script: str) -> dict:
    """The field values `path` gives `script`'s Args (its section for `env_id` in a file of sections), checked
    against the fields' names and types."""
    try:
        with open(path) as f:
            content = json.load(f) if path.endswith(".json") else yaml.safe_load(f)
    except (OSError, ValueError, yaml.YAMLError) as e:
        refuse(f"--config {path}: cannot be read ({type(e).__name__}: {e})".replace("\n", " "))
    if not isinstance(content, dict):
        refuse(f"--config {path}: expected a mapping of fields to values, got {type(content).__name__}")
    fields = {field.name: field for field in dataclasses.fields(args_class)}
    if {"script", "args"} <= content.keys():  # a run folder's args.json
        if content["script"] != script:
            refuse(f"--config {path}: that run was made by {content['script']}, not {script}")
        values = {name: value for name, value in content["args"].items() if name not in NOT_FROM_A_RUN}
    elif content and all(isinstance(section, dict) for section in content.values()) and not fields.keys() & content:
        if env_id not in content:
            refuse(f"--config {path} has no section for --env-id {env_id}; its sections: {', '.join(map(str, content))}")
        values = content[env_id]
    else:
        values = content
    types_of = typing.get_type_hints(args_class)
    checked = {}
    for name, value in values.items():
        name = str(name).replace("-", "_")
        if name not in fields:
            close = difflib.get_close_matches(name, fields, n=1)
            refuse(f"--config {path}: {script} has no field {name!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
        if not _fits(value, types_of[name]):
            refuse(f"--config {path}: {name} must be {_spelled(types_of[name])}, got {value!r}")
        checked[name] = float(value) if types_of[name] is float else value  # YAML reads 1 as an int
    return checked


def _fits(value, expected) -> bool:
    """Whether a value read from YAML or JSON is one of the field's type (an int is a float; a bool is not an int)."""
    if typing.get_origin(expected) in (typing.Union, types.UnionType):
        return any(_fits(value, option) for option in typing.get_args(expected))
    if expected is type(None):
        return value is None
    if expected is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if expected is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, expected)


def _spelled(expected) -> str:
    if typing.get_origin(expected) in (typing.Union, types.UnionType):
        return " or ".join(_spelled(option) for option in typing.get_args(expected))
    return "null" if expected is type(None) else getattr(expected, "__name__", str(expected))
