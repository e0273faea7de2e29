#!/usr/bin/env bash
# ema.sh PROG MPIRUN NP [ARGS...]: --ema, an exponential moving average of the weights, end to end.
# 1. After 3 steps the saved average (ema.safetensors) equals, within f32 rounding, the average
#    that Python computes from the weights after steps 0, 1, 2, 3 (--dump-params of four runs) with
#    timm's warmup decay (update t: 0 for the first, then min(0.9, 1 - t^(-2/3))): parameters and, in a ResNet, rank 0's batch
#    norm statistics.
# 2. 20 steps + resume + 20 steps give the same ema.safetensors, bit for bit, as 40 straight, and
#    the same EMA test figures; state.json records the decay, warmup and 40 updates.
# 3. The EMA figures printed are those of the weights saved: --init-from ema.safetensors --epochs 0
#    evaluates to them, and so does the checkpoint with nothing left to train; they differ from
#    the model's.
# 4. A resume that drops --ema, changes its decay or starts it from a checkpoint without one says
#    so; a manifest without the ema.safetensors that state.json records, or a damaged one, stops
#    the resume, naming the file.
PROG=$1 MPIRUN=$2 NP=$3
shift 3
. "$(dirname "$0")/lib.sh"
A=(--train-limit 1000 --test-limit 200 --batch-size $((32 / NP)) --epochs 3 --no-progress "$@")
E=(--ema 0.9 --ema-warmup)

# 1. the average of the first 3 steps against Python's
train "$NP" "${A[@]}" --epochs 0 --dump-params W0.bin
expect_rc 0
for k in 1 2 3; do # no learning-rate warmup: steps that move the weights
    train "$NP" "${A[@]}" --warmup-steps 0 --max-steps $k --dump-params W$k.bin
    expect_rc 0
done
train "$NP" "${A[@]}" --warmup-steps 0 "${E[@]}" --max-steps 3 --save-every 3 --checkpoint-dir R
expect_rc 0
python3 - R/step-00000003/ema.safetensors W0.bin W1.bin W2.bin W3.bin <<'EOF' || fail "the EMA after 3 steps is not timm's"
import json, struct, sys
from array import array
raw = open(sys.argv[1], "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
head.pop("__metadata__", None)
assert all(v["dtype"] == "F32" for v in head.values()), "not all F32"
ema = array("f", raw[8 + n:])
w = [array("f", open(f, "rb").read()) for f in sys.argv[2:]]
assert sys.byteorder == "little" and all(len(x) == len(ema) for x in w), "sizes differ"
def chain(ds, a, xs):
    for dt, x in zip(ds, xs):
        a = dt * a + (1 - dt) * x
    return a
# timm's get_decay(t) for t = num_updates (1, 2, 3) as its train.py passes it: the first a copy
timm = [0.0] + [min(0.9, 1 - t ** (-2 / 3)) for t in (2, 3)]
worst, other = (0.0, 0, 0.0), 0.0
for i, (e, a, b, c, d) in enumerate(zip(ema, *w)):
    ref = chain(timm, a, (b, c, d))
    err = abs(e - ref) / (1e-3 + abs(ref))
    if err > worst[0]:
        worst = (err, i, ref)
    # without the warmup (decay 0.9 throughout) the average would be this far off
    other = max(other, abs(e - chain([0.0, 0.9, 0.9], a, (b, c, d))) / (1e-3 + abs(ref)))
print("EMA of %d tensors (%d values): largest relative difference from Python's %.2e (value %.8g vs %.8g); "
      "from an EMA without warmup %.2e" % (len(head), len(ema), worst[0], ema[worst[1]], worst[2], other))
sys.exit(0 if worst[0] < 1e-5 and other > 1e-3 else 1)
EOF

# 2. bitwise resume
figures() { grep -oE 'test loss [0-9.]+  test acc [0-9.]+%' "$1" | tail -n 1; }
train "$NP" "${A[@]}" "${E[@]}" --max-steps 40 --save-every 40 --checkpoint-dir S
expect_rc 0
model_fig=$(grep -E '^epoch ' out | tail -n 1 | grep -oE 'test loss [0-9.]+  test acc [0-9.]+%')
ema_fig=$(grep -F '  EMA of the weights (decay 0.9 with warmup): ' out | tail -n 1 | grep -oE 'test loss.*%')
[ -n "$ema_fig" ] && [ -n "$model_fig" ] || fail "no EMA or model test figures printed"
[ "$ema_fig" != "$model_fig" ] || fail "the EMA's figures are the model's ($ema_fig)"
train "$NP" "${A[@]}" "${E[@]}" --max-steps 20 --save-every 20 --checkpoint-dir T
expect_rc 0
train "$NP" "${A[@]}" "${E[@]}" --max-steps 40 --save-every 20 --resume auto --checkpoint-dir T
expect_rc 0
expect_out "  EMA of the weights (decay 0.9 with warmup): $ema_fig"
cmp S/step-00000040/ema.safetensors T/step-00000040/ema.safetensors ||
    fail "ema.safetensors after 20 + 20 steps differs from 40 straight"
cmp S/step-00000040/model.safetensors T/step-00000040/model.safetensors || fail "model.safetensors differs"
python3 -c 'import json, sys; e = json.load(open(sys.argv[1]))["ema"]
sys.exit(not (abs(e["decay"] - 0.9) < 1e-12 and e["warmup"] is True and e["updates"] == 40))' \
    T/step-00000040/state.json || fail "state.json does not record the EMA: $(grep -A4 '"ema"' T/step-00000040/state.json)"
grep -q '"name":[[:space:]]*"ema.safetensors"' T/step-00000040/manifest.json || fail "the manifest lacks ema.safetensors"

# 3. the figures are the saved weights'
train 1 "${A[@]}" --epochs 0 --init-from S/step-00000040/ema.safetensors
expect_rc 0
expect_out "the model as it is: $ema_fig"
train "$NP" "${A[@]}" "${E[@]}" --epochs 0 --resume S/step-00000040
expect_rc 0
expect_out "the model as it is: $model_fig"
expect_out "  EMA of the weights (decay 0.9 with warmup): $ema_fig"

# 4. settings that change, a damaged file
train "$NP" "${A[@]}" --max-steps 41 --resume S/step-00000040 --checkpoint-dir U
expect_rc 0
expect_out "the checkpoint holds an EMA of the weights (decay 0.9) that this run does not keep"
# the warmup turned off is said so (it was "saved decay 0.9 with warmup, now 0.9")
train "$NP" "${A[@]}" --ema 0.9 --max-steps 41 --resume S/step-00000040 --checkpoint-dir U
expect_rc 0
expect_out "EMA settings changed since the checkpoint (saved decay 0.9 with warmup, now 0.9 without warmup); this run's apply"
train "$NP" "${A[@]}" --max-steps 5 --save-every 5 --checkpoint-dir V
expect_rc 0
train "$NP" "${A[@]}" "${E[@]}" --max-steps 6 --save-every 6 --resume auto --checkpoint-dir V
expect_rc 0
expect_out "the checkpoint holds no EMA of the weights: this run's starts from the resumed weights"
python3 -c 'import json, sys; sys.exit(json.load(open(sys.argv[1]))["ema"]["updates"] != 1)' \
    V/step-00000006/state.json || fail "an EMA started at step 5 does not count 1 update at step 6"
mkdir X && cp -r S/step-00000040 X/ # a manifest that lost the file state.json records
python3 -c 'import json, sys; m = json.load(open(sys.argv[1]))
m["files"] = [f for f in m["files"] if f["name"] != "ema.safetensors"]
json.dump(m, open(sys.argv[1], "w"))' X/step-00000040/manifest.json
train "$NP" "${A[@]}" "${E[@]}" --resume X/step-00000040 --checkpoint-dir W
[ "$rc" -ne 0 ] || fail "a checkpoint whose manifest lacks ema.safetensors was resumed"
expect_out "state.json' records an EMA of the weights but the manifest lists no ema.safetensors"
printf '\x01' | dd of=S/step-00000040/ema.safetensors bs=1 seek=200 conv=notrunc status=none
train "$NP" "${A[@]}" "${E[@]}" --resume S/step-00000040 --checkpoint-dir W
[ "$rc" -ne 0 ] || fail "a damaged ema.safetensors was resumed"
expect_out "ema.safetensors': CRC32"
echo "PASS: $NP rank(s): the EMA after 3 steps is timm's, 20 + 20 steps equal 40 bit for bit; EMA $ema_fig," \
     "model $model_fig"
