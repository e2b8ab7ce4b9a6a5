"""The hipify preflight's room: torch's hipify over a tree, the hipcc that checks it, the compile check.

A CUDA tree converted out of place (convert), the hipcc that checks it and where it runs (hipcc), torch's own ROCm
extension build read from the installed torch (torch_extension), and the compile check of the result
(compile_check). The values they fill in are buildkit.core.porting.report's."""
