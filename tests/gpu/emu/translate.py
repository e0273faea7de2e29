#!/usr/bin/env python3
"""translate.py: rewrites CUDA sources for the kernel emulator (cuda_emu.h), so a host C++
compiler builds them. Four changes, nothing else:
  - every launch  KERNEL<<<grid, block, shared, stream>>>(args)  becomes
    ::emu::config(grid, block, shared, stream).run("KERNEL", KERNEL, args)
  - the backend's names ls_cuda_*, ls_cublas_*, ls_cudnn_* become emu_ls_cuda_* ... (in every file
    given: the .cu files, cuda_ops.c and the others, the headers), so the emulated backend links
    beside the real one in liblockstep without a clash;
  - each __shared__ declaration is followed by ::emu::shared_decl(&name, sizeof name), which fills
    the variable with garbage (0xff bytes) for every block, as a GPU's shared memory holds;
  - the CUDA runtime calls the backend makes (RUNTIME below) and every cuBLAS, cuBLASLt and cuDNN
    call become emu_* (the stand-ins declared in cuda_emu_rt.h), so they work on host memory
    without a GPU; what is left of the CUDA runtime (cudaGetErrorString ...) needs no device.
Usage: translate.py OUT_DIR SOURCE...   (each SOURCE is written to OUT_DIR under its own name, a
.cu file as .cc)."""
import os
import re
import sys

RUNTIME = ["cudaGetLastError", "cudaMemsetAsync", "cudaMemcpyAsync", "cudaStreamSynchronize", "cudaFuncGetAttributes",
           "cudaSetDevice", "cudaGetDeviceProperties", "cudaStreamCreateWithFlags", "cudaStreamDestroy", "cudaMalloc",
           "cudaFree", "cudaMallocHost", "cudaFreeHost", "cudaHostAlloc", "cudaGetDevice", "cudaMemGetInfo",
           "cudaEventCreateWithFlags", "cudaEventDestroy", "cudaEventRecord", "cudaEventSynchronize",
           "cudaEventQuery", "cudaStreamWaitEvent"]


def fail(path, pos, text, why):
    line = text.count("\n", 0, pos) + 1
    sys.exit(f"translate.py: {path}:{line}: {why}")


def callee_start(text, end, path):
    """Start of the kernel expression that ends just before end (a name, maybe qualified, maybe
    with template arguments)."""
    i = end
    while i > 0 and text[i - 1].isspace():
        i -= 1
    if i > 0 and text[i - 1] == ">":  # template arguments: walk back to the matching <
        depth = 0
        while i > 0:
            i -= 1
            c = text[i]
            if c == ">":
                depth += 1
            elif c == "<":
                depth -= 1
                if depth == 0:
                    break
        if depth != 0:
            fail(path, end, text, "unbalanced template arguments before <<<")
    while i > 0 and (text[i - 1].isalnum() or text[i - 1] in "_:"):
        i -= 1
    return i


def balanced(text, open_pos, path):
    """Index just past the parenthesis that closes the one at open_pos."""
    depth = 0
    for j in range(open_pos, len(text)):
        if text[j] == "(":
            depth += 1
        elif text[j] == ")":
            depth -= 1
            if depth == 0:
                return j + 1
    fail(path, open_pos, text, "unbalanced parentheses after >>>")


def code_mask(text):
    """For each character of text, whether it is inside a comment or a string or character
    literal (where a <<< is not a launch)."""
    mask = bytearray(len(text))
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            j += 1
        else:
            i += 1
            continue
        mask[i:j] = b"\x01" * (min(j, n) - i)
        i = j
    return mask


def translate(text, path):
    out = []
    pos = 0
    skip = code_mask(text)
    while True:
        k = text.find("<<<", pos)
        if k < 0:
            break
        if skip[k]:  # in a comment or a literal
            out.append(text[pos : k + 3])
            pos = k + 3
            continue
        s = callee_start(text, k, path)
        kernel = text[s:k].strip()
        if not kernel:
            fail(path, k, text, "no kernel name before <<<")
        e = text.find(">>>", k)
        if e < 0:
            fail(path, k, text, "<<< without >>>")
        cfg = text[k + 3 : e].strip()
        a = e + 3
        while a < len(text) and text[a].isspace():
            a += 1
        if a >= len(text) or text[a] != "(":
            fail(path, e, text, "no argument list after >>>")
        close = balanced(text, a, path)
        args = text[a + 1 : close - 1]  # as written: an argument stays on its line
        name = re.sub(r"\s+", " ", kernel)
        out.append(text[pos:s])
        call = f'::emu::config({cfg}).run("{name}", {kernel}' + (f", {args})" if args.strip() else ")")
        out.append(call + "\n" * (text.count("\n", s, close) - call.count("\n")))  # keep line numbers
        pos = close
    out.append(text[pos:])
    text = re.sub(r"\bls_(cuda|cublas|cudnn)_", r"emu_ls_\1_", "".join(out))
    # after each __shared__ declaration, on its line: the emulator poisons the variable per block
    text = re.sub(r"__shared__(\s+[^;{}()]*?\b)(\w+)(\s*(?:\[[^\]]*\]\s*)*);",
                  r"__shared__\1\2\3; ::emu::shared_decl(&\2, sizeof \2);", text)
    text = re.sub(r"\b(" + "|".join(RUNTIME) + r")\b", r"emu_\1", text)
    # every cuBLAS, cuBLASLt and cuDNN call (a name followed by "(": not the types)
    return re.sub(r"\b((?:cublas|cudnn)[A-Z]\w*)(?=\s*\()", r"emu_\1", text)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    for src in sys.argv[2:]:
        with open(src, encoding="utf-8") as f:
            text = f.read()
        base = os.path.basename(src)
        if base.endswith(".cu"):
            base = base[:-3] + ".cc"
        data = f"#line 1 \"{src}\"\n" + translate(text, src)
        dst = os.path.join(outdir, base)
        old = None
        if os.path.exists(dst):
            with open(dst, encoding="utf-8") as f:
                old = f.read()
        if old != data:  # leave an unchanged file alone (no rebuild)
            with open(dst, "w", encoding="utf-8") as f:
                f.write(data)


main()
