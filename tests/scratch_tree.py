"""Writes the small file trees the checkers' --self-test modes build (check_layers.py,
check_links.py): one helper, so both make their trees the same way."""
import os


def write(root, rel, text):
    """Writes TEXT to ROOT/REL, making the folders on the way."""
    path = os.path.join(root, rel)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
