#!/usr/bin/env bash
# ddp::GradScaler against PyTorch's torch.amp.GradScaler on the same gradients: Python runs a small
# model for 16 float16-autocast steps with an inf in the batch at six chosen steps, with SGD
# (GradScaler reads found_inf on the host) and with fused AdamW (GradScaler hands it found_inf);
# C++ (build/bin/grad_scaler_replay) runs the same weights and batches with ddp::GradScaler,
# ddp::Sgd and PyTorch's fused AdamW kernel. The scale after every step and the skipped steps
# must be equal, the final parameters within 1e-6 (python/grad_scaler_reference.py compares).
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/python_bridge_lib.sh"
run_logged make.log "$PY" "$DDPW_ROOT/python/grad_scaler_reference.py" make inputs.pt python.pt ||
  { cat make.log; fail "the Python reference run failed"; }
cat make.log
run_logged cpp.log "$BIN/grad_scaler_replay" inputs.pt cpp.pt || { cat cpp.log; fail "grad_scaler_replay failed"; }
cat cpp.log
run_logged check.log "$PY" "$DDPW_ROOT/python/grad_scaler_reference.py" check python.pt cpp.pt ||
  { cat check.log; fail "C++ and Python differ"; }
cat check.log
grep -q "skipped steps \[0, 1, 5, 9, 10, 11\] on both sides" check.log ||
  fail "the injected steps were not the ones skipped"
pass "ddp::GradScaler moved the scale and skipped the steps as torch.amp.GradScaler did (SGD and fused AdamW)"
