# Training functions for the Python SDK parity test (tests/python_sdk_parity.rs): the Rust side finds each
# function in this file by name, the SDK takes it from the imported module; both must build the same command.
import functools


def traced(func):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        return func(*args, **kwargs)

    return wrapper


def train_simple():
    print("hello from the trainer")


def train_with_args(lr, epochs, name="model"):
    """Prints its arguments."""
    for epoch in range(epochs):
        print(f"epoch {epoch}: lr={lr} name={name}")


@traced
def train_decorated(config, layers=(64, 32)):
    import json

    # A comment inside the body.
    print(json.dumps({"config": config, "layers": list(layers)}))


def train_tricky(path):
    """A docstring
with a line at column 0 and characters the shell must not touch: $HOME `id` {func_file} \\ 'q' "dq".
"""
    text = f"{path}/{{braces}}"
    total = (1 +
2)
    print(text, total, "$PATH")
    # a comment at the end of the body

    # and another after a blank line


def outer():
    def train_nested(x, y=None):
        if y is None:
            return x
        return x + y

    return train_nested


async def train_async(steps):
    print(steps)
