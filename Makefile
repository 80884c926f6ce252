# The few commands a newcomer needs. `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.perception-installed
DEMO_DATA := data/synthetic_nuscenes
BDD_DATA := data/synthetic_bdd100k
DEMO_WORK := work_dirs/demo
MOTION_DATA := data/synthetic_motion
MOTION_WORK := work_dirs/motion
export NO_ALBUMENTATIONS_UPDATE := 1
export HF_HUB_OFFLINE := 1
export PYTHONUNBUFFERED := 1

.PHONY: install demo demo-data demo-deploy demo-motion test test-overfit test-extended bench lint clean

install: $(STAMP)

# Re-runs only when the dependency declarations change; torch/torchvision are pinned
# explicitly because they decide which wheels (and how many GB) get installed.
$(STAMP): pyproject.toml constraints.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade "pip>=24"
	$(PY) -m pip install -q -c constraints.txt torch==2.14.1 torchvision==0.29.1 -e ".[dev,export]"
	touch $(STAMP)

$(DEMO_DATA)/.complete: | $(STAMP)
	$(PY) tools/make_synthetic_nuscenes.py $(DEMO_DATA) --scenes 12 --samples-per-scene 16 \
		--cameras 6 --image-size 640x360 --val-scenes 2 --seed 0

# Traffic lights with colour, 2D lanes, drivable masks: front-camera frames in the BDD100K layout.
$(BDD_DATA)/.complete: | $(STAMP)
	$(PY) tools/make_synthetic_bdd100k.py $(BDD_DATA) --videos 12 --frames-per-video 16 --val-videos 3 \
		--image-size 640x360 --seed 0

demo-data: $(DEMO_DATA)/.complete $(BDD_DATA)/.complete

demo: $(STAMP) $(DEMO_DATA)/.complete $(BDD_DATA)/.complete
	$(PY) tools/train.py configs/demo_synthetic.py --work-dir $(DEMO_WORK)
	$(PY) tools/test.py configs/demo_synthetic.py $(DEMO_WORK)/checkpoints/last.ckpt --work-dir $(DEMO_WORK) --report
	$(PY) tools/demo.py configs/demo_synthetic.py --checkpoint $(DEMO_WORK)/checkpoints/last.ckpt \
		--images $(BDD_DATA)/images/100k/val --out $(DEMO_WORK)/drawn --min-score 0.2
	@echo "learning curves (training loss, held-out metrics): $(DEMO_WORK)/curves.png"
	@echo "predictions drawn on the held-out BDD100K-format frames: $(DEMO_WORK)/drawn/"
	@echo "TensorBoard (losses, metrics, LR per group, drawn validation frames): $(VENV)/bin/tensorboard --logdir $(DEMO_WORK)/tensorboard"
	@echo "evaluation report (open in a browser): $(DEMO_WORK)/report/index.html"

# After `make demo`: export the demo checkpoint (all deployment checks), evaluate the ONNX model with
# ONNX Runtime (same metrics as PyTorch) and draw its predictions on the validation front cameras.
demo-deploy: $(STAMP)
	@test -f $(DEMO_WORK)/checkpoints/last.ckpt || { echo "run 'make demo' first"; exit 1; }
	$(PY) tools/export_onnx.py configs/demo_synthetic.py $(DEMO_WORK)/checkpoints/last.ckpt --out $(DEMO_WORK)/model.onnx
	$(PY) tools/test.py configs/demo_synthetic.py --onnx $(DEMO_WORK)/model.onnx --work-dir $(DEMO_WORK)/onnx
	$(PY) tools/demo.py configs/demo_synthetic.py --onnx $(DEMO_WORK)/model.onnx --out $(DEMO_WORK)/drawn \
		--images $(DEMO_DATA)/samples/CAM_FRONT --min-score 0.1

# Trajectory forecasting: 16 scenes x 20 s of traffic, tables and maps only (no images, ~10 s).
$(MOTION_DATA)/.complete: | $(STAMP)
	$(PY) tools/make_synthetic_nuscenes.py $(MOTION_DATA) --scenes 16 --samples-per-scene 40 \
		--cameras 0 --val-scenes 4 --seed 0

demo-motion: $(STAMP) $(MOTION_DATA)/.complete
	$(PY) tools/train.py configs/motion_synthetic.py --work-dir $(MOTION_WORK)
	$(PY) tools/test.py configs/motion_synthetic.py $(MOTION_WORK)/checkpoints/last.ckpt --work-dir $(MOTION_WORK)
	$(PY) tools/export_onnx.py configs/motion_synthetic.py $(MOTION_WORK)/checkpoints/last.ckpt \
		--out $(MOTION_WORK)/forecaster.onnx

# About 15 minutes on 2 cores; the overfitting tier (~9) and the extended tier (~5) run in CI after it (.ci/run).
test: $(STAMP)
	$(PY) -m pytest -q --durations=25 -m "not gpu and not overfit and not extended"

test-overfit: $(STAMP)
	$(PY) -m pytest -q -m "overfit and not gpu"

test-extended: $(STAMP)
	$(PY) -m pytest -q -m "extended and not gpu"

bench: $(STAMP)
	$(PY) bench/train_step_rate.py
	$(PY) bench/forecast_latency.py
	$(PY) bench/deployment_latency.py --batch 1 --threads 2

lint: $(STAMP)
	$(VENV)/bin/ruff check perception tools tests bench

clean:
	rm -rf work_dirs .pytest_cache
