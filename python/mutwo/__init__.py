# mutwo's Python side: capture a PyTorch training step as a mutwo step file
# (docs/step-file.md). The work is in mutwo.capture (`from mutwo.capture import
# capture, CaptureError`; `python3 -m mutwo.capture --help`); nothing is
# re-exported here, so that `mutwo.capture` always names that module.
