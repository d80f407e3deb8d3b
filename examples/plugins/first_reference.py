"""A generator plugin: returns the case's first reference image, or a blank image when it has none.

    trace run BENCH --generator python:examples/plugins/first_reference.py --judge oracle --out RUN

A baseline that copies its input: it keeps an anchored entity perfectly and transfers nothing,
which is what the anchor and disentangle scores then show. Also the smallest example of the
generator interface (docs/evaluate.md): subclass ``Generator``, implement ``generate``.
"""

from __future__ import annotations

import io

from PIL import Image

from tracebench.providers import Generator


class FirstReference(Generator):
    spec = "python:first_reference"

    def key(self, case, references):
        return None  # nothing worth caching: it is as fast as reading the cache

    def generate(self, case, references):  # a plain function: run in a worker thread
        if references:
            return bytes(references[0])
        buffer = io.BytesIO()
        Image.new("RGB", (256, 256), "white").save(buffer, format="PNG")
        return buffer.getvalue()


generator = FirstReference  # the name `python:first_reference.py` looks for
