#!/usr/bin/env bash
# init_from.sh MLP MPIRUN [RESNET]: fashion_mlp --init-from FILE on the real Fashion-MNIST test set, with
# files written here by Python's standard library in the safetensors layout (as
# safetensors.torch.save_file writes a state_dict):
#   - all zeros in f16: every logit 0, so the loss is ln 10 and argmax picks class 0 for every
#     sample: 10.00% of the balanced test set (--epochs 0 evaluates the model as it is);
#   - the last bias (5 at class 3, else 0) in bf16 and the rest f64 zeros, with PyTorch's
#     "num_batches_tracked" beside them: 10.00% and the loss ln(9 + e^5) - 0.5;
#   - a checkpoint's model.safetensors: the same test figures as the run that wrote it; on 2 ranks
#     (rank 0 reads, the others receive) as on 1; with RESNET, fashion_resnet's too (batch norm's
#     running statistics, which evaluation uses, are in the file);
#   - refused, naming the file and the tensor: a ResNet with --dropout from one without and the
#     reverse (the classifier numbered one further: said as such, with the names each side lacks),
#     one missing, a wrong shape, one the model lacks,
#     an integer tensor, a NaN, an f64 past f32's range, a file that is not safetensors, and one
#     that does not exist; a missing tensor with what the file holds instead (names under DDP's
#     'module.' or torch.compile's '_orig_mod.' prefix, a tensor the model lacks, a checkpoint's
#     optimizer state), and a checkpoint or a directory given for the file.
MLP=$1 MPIRUN=$2 RESNET=${3:-}
PROG=$MLP
. "$(dirname "$0")/lib.sh"
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
# write NAME SPEC...: SPEC = tensor:dtype:d0xd1:fill, fill "zeros" or "onehot=K=V" (V at index K)
write() {
    python3 - "$@" <<'EOF'
import json, struct, sys
out, specs = sys.argv[1], sys.argv[2:]
header, blobs, off = {}, [], 0
for spec in specs:
    name, dtype, shape, fill = spec.split(":")
    dims = [int(d) for d in shape.split("x")]
    n = 1
    for d in dims:
        n *= d
    vals = [0.0] * n
    if fill.startswith("onehot="):
        _, k, v = fill.split("=")
        vals[int(k)] = float(v)
    if dtype == "F32":
        b = struct.pack("<%df" % n, *vals)
    elif dtype == "F64":
        b = struct.pack("<%dd" % n, *vals)
    elif dtype == "F16":
        b = struct.pack("<%de" % n, *vals)
    elif dtype == "BF16":  # the top half of the f32 (exact for the values used here)
        b = b"".join(struct.pack("<I", struct.unpack("<I", struct.pack("<f", x))[0])[2:] for x in vals)
    elif dtype == "I64":
        b = struct.pack("<%dq" % n, *[int(x) for x in vals])
    header[name] = {"dtype": dtype, "shape": dims, "data_offsets": [off, off + len(b)]}
    blobs.append(b)
    off += len(b)
h = json.dumps(header).encode()
h += b" " * (-len(h) % 8)
with open(out, "wb") as f:
    f.write(struct.pack("<Q", len(h)) + h + b"".join(blobs))
EOF
}
A=(--hidden 512,256 --no-progress --epochs 0)
L0="0.weight:F16:512x784:zeros" B0="0.bias:F16:512:zeros" L2="2.weight:F16:256x512:zeros" B2="2.bias:F16:256:zeros"
L4="4.weight:F16:10x256:zeros" B4="4.bias:F16:10:zeros"
write zeros.st "$L0" "$B0" "$L2" "$B2" "$L4" "$B4"
train 1 "${A[@]}" --init-from zeros.st
expect_rc 0
expect_out "nothing to train (--epochs 0); the model as it is: test loss 2.3026  test acc 10.00%"

want=$(python3 -c 'import math; print("%.4f" % (math.log(9 + math.exp(5)) - 0.5))')
write bias.st "0.weight:F64:512x784:zeros" "0.bias:F64:512:zeros" "2.weight:F64:256x512:zeros" \
    "2.bias:F64:256:zeros" "4.weight:F64:10x256:zeros" "4.bias:BF16:10:onehot=3=5" "1.num_batches_tracked:I64:1:zeros"
train 1 "${A[@]}" --init-from bias.st
expect_rc 0
expect_out "the model as it is: test loss $want  test acc 10.00%"

# a checkpoint's weights: the figures the run printed at its end
train 1 --hidden 64 --no-progress --epochs 1 --train-limit 2000 --save-every 1000 --checkpoint-dir D
expect_rc 0
end=$(grep -oE 'test loss [0-9.]+  test acc [0-9.]+%' out | tail -n 1)
[ -n "$end" ] || fail "the training run printed no test figures"
ck=$(ls -d D/step-* | tail -n 1)
train 1 --hidden 64 --no-progress --epochs 0 --init-from "$ck/model.safetensors"
expect_rc 0
expect_out "the model as it is: $end"
if [ "$MPIRUN" != none ]; then
    train 2 --hidden 64 --no-progress --epochs 0 --init-from "$ck/model.safetensors"
    expect_rc 0
    expect_out "the model as it is: $end"
    # rank 0 finds the file wanting: every rank stops with its message
    train 2 --hidden 64 --no-progress --epochs 0 --init-from zeros.st
    [ "$rc" -ne 0 ] || fail "2 ranks: a wrong file was accepted"
    expect_out "fashion_mlp: --init-from: invalid argument: 'zeros.st': tensor '0.weight' has shape [512, 784] but the model's parameter 0 is [64, 784]"
fi

if [ -n "$RESNET" ]; then
    PROG=$RESNET NAME=fashion_resnet
    R=(--widths 8,16 --no-progress --train-limit 1000 --test-limit 500)
    train 1 "${R[@]}" --epochs 1 --save-every 1000 --checkpoint-dir R
    expect_rc 0
    rend=$(grep -oE 'test loss [0-9.]+  test acc [0-9.]+%' out | tail -n 1)
    [ -n "$rend" ] || fail "the ResNet run printed no test figures"
    train 1 "${R[@]}" --epochs 0 --init-from "$(ls -d R/step-* | tail -n 1)/model.safetensors"
    expect_rc 0
    expect_out "the model as it is: $rend"
    # and into a bf16 model: its parameters are named as the f32 model's (a cast layer renamed them
    # all: "tensor '2.weight' has shape [8] but the model's parameter 0 is [8, 1, 3, 3]")
    train 1 "${R[@]}" --epochs 0 --precision bf16 --init-from "$(ls -d R/step-* | tail -n 1)/model.safetensors"
    expect_rc 0
    expect_out "the model as it is: test loss"
    # --dropout inserts a Dropout before the classifier, which it numbers one further: a model with
    # it from weights without it, and the reverse, are told that the shapes agree under other numbers
    rck="$(ls -d R/step-* | tail -n 1)/model.safetensors"
    train 1 "${R[@]}" --epochs 0 --dropout 0.1 --init-from "$rck"
    expect_rc 1
    expect_out "fashion_resnet: --init-from: invalid argument: '$rck': no tensor '7.weight' (the model's parameter 18); the file has 2 tensors the model lacks ('6.bias' [10], '6.weight' [10, 16]) and lacks 2 of the model's ('7.bias' [10], '7.weight' [10, 16]): the same shapes under other numbers, as where a layer without weights (a Dropout?) was added or removed before them: build the model as the file's was"
    train 1 "${R[@]}" --epochs 1 --max-steps 1 --dropout 0.1 --save-every 1 --checkpoint-dir RD
    expect_rc 0
    train 1 "${R[@]}" --epochs 0 --init-from RD/step-00000001/model.safetensors
    expect_rc 1
    expect_out "'RD/step-00000001/model.safetensors': no tensor '6.weight' (the model's parameter 18); the file has 2 tensors the model lacks ('7.bias' [10], '7.weight' [10, 16]) and lacks 2 of the model's ('6.bias' [10], '6.weight' [10, 16]): the same shapes under other numbers"
    # a negative running variance (a hand-edited file) is refused, named: it evaluated to NaN, exit 0
    python3 - "$(ls -d R/step-* | tail -n 1)/model.safetensors" negvar.st <<'EOF'
import json, struct, sys
raw = bytearray(open(sys.argv[1], "rb").read())
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
name = sorted(k for k in head if k.endswith("running_var"))[0]
at = 8 + n + head[name]["data_offsets"][0] + 4 * 3
raw[at:at + 4] = struct.pack("<f", -0.5)
open(sys.argv[2], "wb").write(raw)
EOF
    train 1 "${R[@]}" --epochs 0 --init-from negvar.st
    expect_rc 1
    expect_out "'negvar.st': tensor '"
    expect_out "running_var' holds -0.5 at element 3 of "
    expect_out ": a variance cannot be negative"
    PROG=$MLP NAME=fashion_mlp
fi

# refused: each names the file and the tensor
write missing.st "$L0" "$B0" "$L2" "$B2" "$L4"
train 1 "${A[@]}" --init-from missing.st
expect_rc 1
expect_out "fashion_mlp: --init-from: invalid argument: 'missing.st': no tensor '4.bias' (the model's parameter 5)"
# what the file holds instead is said (it was only "no tensor '0.weight'"): a DDP or torch.compile
# wrapper's prefix, a tensor the model lacks, a checkpoint's optimizer state or the checkpoint itself
write ddp.st "module.$L0" "module.$B0" "module.$L2" "module.$B2" "module.$L4" "module.$B4"
train 1 "${A[@]}" --init-from ddp.st
expect_rc 1
expect_out "'ddp.st': no tensor '0.weight' (the model's parameter 0), but 'module.0.weight': the file's names are under a prefix 'module.' (DDP's 'module.', torch.compile's '_orig_mod.'?): save the unwrapped model's state_dict, or strip the prefix"
# a name under another tensor's path is no prefix of the file's names: the model's '0.weight' in a
# file of '1.0.weight' (a nested block's) and '0.bias'
write nested.st "1.$L0" "$B0"
train 1 "${A[@]}" --init-from nested.st
expect_rc 1
expect_out "'nested.st': no tensor '0.weight' (the model's parameter 0); the file has 1 tensor the model lacks ('1.0.weight' [512, 784]) and lacks 5 of the model's ('0.weight' [512, 784], '2.bias' [256], '2.weight' [256, 512] and 2 more): a different architecture, or names of another scheme?"
write compiled.st "_orig_mod.$L0" "_orig_mod.$B0" "_orig_mod.$L2" "_orig_mod.$B2" "_orig_mod.$L4" "_orig_mod.$B4"
train 1 "${A[@]}" --init-from compiled.st
expect_rc 1
expect_out "but '_orig_mod.0.weight': the file's names are under a prefix '_orig_mod.'"
# a Dropout renumbers the layers after it: the same shapes under other numbers, said as such (it
# said only "the file's '2.weight' is not in the model: a different architecture?")
train 1 "${A[@]}" --dropout 0.1 --init-from zeros.st
expect_rc 1
expect_out "'zeros.st': no tensor '3.weight' (the model's parameter 2); the file has 4 tensors the model lacks ('2.bias' [256], '2.weight' [256, 512], '4.bias' [10] and 1 more) and lacks 4 of the model's ('3.bias' [256], '3.weight' [256, 512], '6.bias' [10] and 1 more): the same shapes under other numbers, as where a layer without weights (a Dropout?) was added or removed before them: build the model as the file's was"
train 1 --hidden 64 --no-progress --epochs 0 --init-from "$ck/optimizer.safetensors"
expect_rc 1
expect_out "no tensor '0.weight' (the model's parameter 0): the file is a checkpoint's optimizer state (its metadata \"lockstep\" is \"optimizer\"), not weights; a checkpoint's weights are its model.safetensors"
train 1 --hidden 64 --no-progress --epochs 0 --init-from "$ck"
expect_rc 1
expect_out "'$ck' is a checkpoint (a directory), not a safetensors file: its weights are '$ck/model.safetensors'"
train 1 --hidden 64 --no-progress --epochs 0 --init-from D
expect_rc 1
expect_out "'D' is a directory, not a safetensors file (a checkpoint's weights are DIR/step-N/model.safetensors)"
train 1 --hidden 512,128 --no-progress --epochs 0 --init-from zeros.st
expect_rc 1
expect_out "'zeros.st': tensor '2.weight' has shape [256, 512] but the model's parameter 2 is [128, 512]"
write extra.st "$L0" "$B0" "$L2" "$B2" "$L4" "$B4" "6.weight:F32:10x10:zeros"
train 1 "${A[@]}" --init-from extra.st
expect_rc 1
expect_out "'extra.st': the file has 1 tensor the model lacks ('6.weight' [10, 10]), beside all the model's 6 parameters and 0 buffers: a different architecture?"
write int.st "$L0" "$B0" "$L2" "$B2" "$L4" "4.bias:I64:10:zeros"
train 1 "${A[@]}" --init-from int.st
expect_rc 1
expect_out "'int.st': tensor '4.bias' is I64, not a floating-point type"
# non-finite weights (a diverged run's, or an f64 past f32's range): they trained on to the end with
# a NaN loss and exit 0
write nan.st "$L0" "$B0" "$L2" "2.bias:F32:256:onehot=7=nan" "$L4" "$B4"
train 1 "${A[@]}" --init-from nan.st
expect_rc 1
expect_out "fashion_mlp: --init-from: invalid argument: 'nan.st': tensor '2.bias' holds NaN at element 7 of 256: not weights to train from"
write big.st "0.weight:F64:512x784:onehot=5=1e300" "$B0" "$L2" "$B2" "$L4" "$B4"
train 1 "${A[@]}" --init-from big.st
expect_rc 1
expect_out "'big.st': tensor '0.weight' holds inf at element 5 of 401408 (as the model's dtype): not weights to train from"
echo "not a safetensors file" >text.st
train 1 "${A[@]}" --init-from text.st
expect_rc 1
expect_out "fashion_mlp: --init-from: bad format: 'text.st': header length"
# what torch.save writes (a zip archive) is named as such, with what to do
python3 -c 'import zipfile; z = zipfile.ZipFile("sd.pt", "w"); z.writestr("archive/data.pkl", b"x" * 100); z.close()'
train 1 "${A[@]}" --init-from sd.pt
expect_rc 1
expect_out "'sd.pt' is not a safetensors file but a zip archive (what torch.save writes: save the state_dict with safetensors.torch.save_file instead)"
train 1 "${A[@]}" --init-from nowhere.st
expect_rc 1
expect_out "nowhere.st"
train 1 "${A[@]}" --init-from ''
expect_rc 2
echo "PASS: --init-from: zeros (f16) and a bias (bf16, f64, num_batches_tracked) give the computed test figures;" \
     "a checkpoint's weights its run's ($end) on 1 and 2 ranks${RESNET:+, the ResNet as well}; 14 bad files refused," \
     "saying what they hold instead"
