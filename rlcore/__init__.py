"""The foundation every process imports (see docs/architecture.md)."""

import os

# pydantic looks for plugins by scanning every installed distribution's entry points the first
# time a model class is built: about 0.1 s of each command's start (`rl --help` included) for
# plugins this project never uses. Set the variable to "" to have them loaded.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
