"""Running a cell in a kernel through ``jupyter_client``, as the GPU-kernel tests of
both tiers do (tests/unit/test_kernel_provisioner.py, tests/integration/test_kernel_service.py)."""

from __future__ import annotations


async def run_cell(client, code: str, timeout: float) -> str:
    """The text ``code`` printed; fails unless the cell ended ``ok`` within ``timeout``."""
    out: list[str] = []
    reply = await client.execute_interactive(
        code, timeout=timeout,
        output_hook=lambda m: out.append(m["content"].get("text", "")))
    assert reply["content"]["status"] == "ok", reply["content"]
    return "".join(out)
