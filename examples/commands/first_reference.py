"""A generator for ``--generator command:...``: reads the case on stdin, writes an image.

    trace run BENCH --generator "command:python examples/commands/first_reference.py {output}" \
        --judge oracle --out RUN

The JSON on stdin is the case record, as in the benchmark's cases.jsonl, except that each
reference's ``path`` is absolute (a copy that exists while the command runs)::

    {"id": "s2-0001", "prompt": "...", "references": [{"image": 1, "path": "/tmp/.../1-cat.png", ...}],
     "terms": [...], "checklist": [...], ...}

This one answers with its first reference image resized to 512x512 (a grey image when the
case has none): a baseline that copies instead of composing. Put your model's call here.
It says which references it used in ``{output}.json`` (optional; docs/clutter.md reads it).
"""

import json
import sys

from PIL import Image


def main(output: str) -> None:
    case = json.load(sys.stdin)
    references = case["references"]
    if references:
        with Image.open(references[0]["path"]) as image:
            picture = image.convert("RGB").resize((512, 512))
    else:
        picture = Image.new("RGB", (512, 512), (128, 128, 128))
    picture.save(output, format="PNG")
    with open(output + ".json", "w", encoding="utf-8") as sidecar:  # optional: the references it used
        json.dump({"used_references": [references[0]["image"]] if references else []}, sidecar)


if __name__ == "__main__":
    main(sys.argv[1])
