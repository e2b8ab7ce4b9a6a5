"""The matrix room: what a team's matrix says, read from its files' bytes, checked and resolved into one frozen Matrix.

- text: matrix files as text (bytes decoded, TOML parsed, every error located by file and line);
- fields: the matrix schema as data (every key, its kind and grammar, its default, whether stacks inherit it);
- templates: the templates a matrix can use, as the file loader read them (a team's folders first);
- lock: matrix.lock, what the matrix's moving references resolved to;
- resolve: layering (`extends`), validation against the schema, and the resolved, frozen Matrix.
"""
