# weir: the two entry points of the README, plus the pieces they are made of.
#   make demo   build a realistic trace with `weir synth` and count it on 2 queues
#   make test   the whole test suite (module layers, the guide's links, format and clippy, unit, CLI, then as root the live
#               and corpus tests, the Python package, Miri, a short fuzz run, the libpcap suite, the
#               streams oracle); run it as root, with ../shared/corpus present
#   make bench  the benchmarks in bench/ (long; results in bench/results/)
#   make docs   the user guide (docs/, mdBook) into docs/book/

SHELL := /bin/bash
export PATH := $(HOME)/.cargo/bin:$(PATH)
CARGO ?= cargo
WEIR := target/release/weir
DEMO_TRACE := target/demo/synth.pcap

.PHONY: demo test docs docs-check install install-check setup setup-nightly build layers style unit privileged miri fuzz-smoke bench clean pcap-lib pcap-suite \
	nids-streams streams-oracle python flows-collector

setup:
	@scripts/setup

setup-nightly:
	@WEIR_SETUP_NIGHTLY=1 scripts/setup

build: setup
	$(CARGO) build --release --workspace

demo: build
	@mkdir -p target/demo
	$(WEIR) synth -o $(DEMO_TRACE) --packets 2000000 --flows 100000 --seed 1
	$(WEIR) count $(DEMO_TRACE)@0-1
	$(WEIR) count --json -f 'tcp port 443' $(DEMO_TRACE)

# The library's top-level modules may only use modules below them (no cycle), and
# the design chapter (docs/src/design.md) shows them as they are; the checker first
# checks itself on its fixtures.
layers:
	scripts/module-graph --self-test
	scripts/module-graph --check

# The user guide: mdBook builds docs/ into docs/book/. docs-check then fails on
# any relative link or #anchor that does not resolve, in the built book or in
# README.md (scripts/docs-check; offline, it follows no web link).
docs: setup
	mdbook build docs

docs-check: docs
	scripts/docs-check docs/book

# One format for the tree (rustfmt.toml), clippy with warnings as errors
# (the workspace's lints deny an unsafe block without a SAFETY comment), and
# documentation whose every link resolves. The weir binary is documented on
# its own: it shares the library's name.
style: setup
	$(CARGO) fmt --all --check
	cd fuzz && $(CARGO) fmt --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps --lib
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc -p weir-cli --no-deps --bins

# The tests that need neither root nor the corpus; cargo lists the others as ignored.
unit: setup
	$(CARGO) test --workspace

# The tests marked #[ignore = "needs root: ..."] or #[ignore = "needs the corpus
# in ../shared/corpus"], and only those: the live veth test bed, AF_PACKET,
# AF_XDP, XDP, eBPF and cgroups as root, and the corpus. Without root this step
# fails rather than skip, and so does a test that finds something missing.
privileged: setup
	@if [ "$$(id -u)" -ne 0 ]; then \
		echo "make privileged: the tests marked #[ignore = \"needs root: ...\"] need root (the veth test bed, AF_PACKET, AF_XDP, cgroups); run make test as root" >&2; \
		exit 1; \
	fi
	@if [ ! -d ../shared/corpus ]; then \
		echo "make privileged: the tests marked #[ignore = \"needs the corpus in ../shared/corpus\"] need it beside the clone" >&2; \
		exit 1; \
	fi
	$(CARGO) test --workspace -- --ignored

miri: setup-nightly
	PROPTEST_CASES=8 MIRIFLAGS=-Zmiri-disable-isolation $(CARGO) +nightly miri test -p weir --lib -- ring:: pool::

fuzz-smoke: setup-nightly
	scripts/fuzz-smoke 30
	scripts/fuzz-smoke 5 pcap_offline
	scripts/fuzz-smoke 5 cbpf
	scripts/fuzz-smoke 5 jit
	scripts/fuzz-smoke 5 tcp_reassembly
	scripts/fuzz-smoke 5 ip_defrag

# Where cargo builds (CARGO_TARGET_DIR or target/), asked when a recipe needs it.
TARGET_DIR = $(shell $(CARGO) metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

# weir's libpcap: a directory holding libpcap.so.0.8, to put first on
# LD_LIBRARY_PATH; `weir run` looks for it beside its own directory.
pcap-lib: setup
	$(CARGO) build --release -p weir-pcap -p weir-cli
	@mkdir -p $(TARGET_DIR)/weir-pcap
	cp $(TARGET_DIR)/release/libpcap.so $(TARGET_DIR)/weir-pcap/libpcap.so.0.8

# tcpdump 4.99.3's own test suite, on the system libpcap and then on weir's:
# every test stock libpcap passes must pass on weir. Then `weir run` with tcpdump,
# the flow exporters offline (softflowd, nfpcapd); the exported symbols and the
# programs that need them (tcpreplay's tools, pcapy, pmacctd, argus); every
# getter on savefiles and dead handles, libpcap's error words, pcap_file's
# positions (getters.c over the corpus, argus, ettercap); savefile packets written
# into, as programs do (writable.c); pcap_close and thread
# cancellation while a read waits (closeloop.c, cancel.c, ngrep, sipgrep,
# ettercap); and live on the veth test bed (tcpdump, weir run --locality, a
# nonblocking poll loop, softflowd and fprobe; live handles' getters, iftop).
pcap-suite: pcap-lib
	@mkdir -p target/pcap-suite
	python3 tests/pcap-compat/tcpdump_suite.py -j 2 --json target/pcap-suite/stock.json
	python3 tests/pcap-compat/tcpdump_suite.py -j 2 --strict-stderr --libdir $(TARGET_DIR)/weir-pcap \
		--baseline target/pcap-suite/stock.json --json target/pcap-suite/weir.json --list-failures
	WEIR_BIN=$(TARGET_DIR)/release/weir python3 tests/pcap-compat/weir_run_check.py
	python3 tests/pcap-compat/refilter_check.py --libdir $(TARGET_DIR)/weir-pcap
	python3 tests/pcap-compat/exporters_check.py --libdir $(TARGET_DIR)/weir-pcap
	python3 tests/pcap-compat/symbols_check.py --libdir $(TARGET_DIR)/weir-pcap
	python3 tests/pcap-compat/handles_check.py --libdir $(TARGET_DIR)/weir-pcap -j 2
	python3 tests/pcap-compat/savefile_write_check.py --libdir $(TARGET_DIR)/weir-pcap -j 2
	python3 tests/pcap-compat/teardown_check.py --libdir $(TARGET_DIR)/weir-pcap
	@if [ "$$(id -u)" -eq 0 ]; then \
		scripts/testbed --queues 2 -- python3 tests/pcap-compat/live_check.py \
			--libdir $(TARGET_DIR)/weir-pcap --weir $(TARGET_DIR)/release/weir && \
		scripts/testbed --queues 2 -- python3 tests/pcap-compat/live_handles_check.py \
			--libdir $(TARGET_DIR)/weir-pcap; \
	else echo "pcap-suite: live checks skipped (they need root for the veth test bed)"; fi

# The libnids peer of `weir streams` (bench/peers/nids_streams.c): oracle and benchmark peer.
nids-streams: setup
	@mkdir -p $(TARGET_DIR)/peers
	cc -O2 -Wall -o $(TARGET_DIR)/peers/nids_streams bench/peers/nids_streams.c -lnids -lpcap

# weir streams -o against two oracles, tcpflow and libnids, on every trace of the corpus:
# file names and bytes must agree, or differ for a reason documented in the script (its
# DOCUMENTED list; an entry whose file no longer differs fails too). Two traces at a time:
# about 70 s on 2 busy cores. STREAMS_ORACLE_ARGS=--peers-only compares the two peers alone,
# --trace SUBSTRING only some traces, --verbose lists every documented difference.
streams-oracle: nids-streams build
	@if [ ! -d ../shared/corpus ]; then \
		echo "make streams-oracle: the corpus must be in ../shared/corpus, beside the clone" >&2; \
		exit 1; \
	fi
	python3 tests/streams/compare.py -j 2 --weir $(TARGET_DIR)/release/weir --nids $(TARGET_DIR)/peers/nids_streams \
		$(STREAMS_ORACLE_ARGS)

# weir flows into an nfcapd started with its defaults, the demo trace read at top speed with one
# queue and two: nfcapd must store every record weir says it exported (tests/flows/collector_check.py).
flows-collector: build
	python3 tests/flows/collector_check.py --weir $(TARGET_DIR)/release/weir

# The Python package (crates/weir-py): pip builds it with maturin (from PyPI) and installs it
# into python3, with numpy, pandas, pyarrow and pytest from PyPI; then its pytest suite,
# which compares it with the weir CLI built here (about half a minute; the live tests
# need root and say so when skipped). PIP_BREAK_SYSTEM_PACKAGES lets pip install into
# a distribution's own Python too (Debian's marks itself externally managed).
python: setup
	$(CARGO) build --release -p weir-cli
	PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check numpy==2.4.6 pandas==3.1.1 pyarrow==26.0.1 pytest==9.2.0
	PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps ./crates/weir-py
	cd crates/weir-py && WEIR_BIN=$(TARGET_DIR)/release/weir python3 -m pytest -q -p no:cacheprovider tests

test: layers docs-check style unit privileged python miri fuzz-smoke pcap-suite install-check streams-oracle flows-collector
	@echo "make test: all suites passed"

# Installs under PREFIX (default /usr/local; DESTDIR for packaging): the weir
# binary, weir's libpcap in lib/weir (out of the loader's path: `weir run`
# puts it in front for the programs it runs), the C API's library, headers
# and pkg-config file, and the man pages (`weir man`, from the clap
# definitions, so they say what --help says).
PREFIX ?= /usr/local
VERSION = $(shell sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -1)
install: pcap-lib
	$(CARGO) build --release -p weir-capi
	install -d $(DESTDIR)$(PREFIX)/bin $(DESTDIR)$(PREFIX)/lib/weir $(DESTDIR)$(PREFIX)/lib/pkgconfig \
		$(DESTDIR)$(PREFIX)/include $(DESTDIR)$(PREFIX)/share/man/man1
	install -m 755 $(TARGET_DIR)/release/weir $(DESTDIR)$(PREFIX)/bin/weir
	install -m 644 $(TARGET_DIR)/weir-pcap/libpcap.so.0.8 $(DESTDIR)$(PREFIX)/lib/weir/libpcap.so.0.8
	install -m 755 $(TARGET_DIR)/release/libweirstream.so $(DESTDIR)$(PREFIX)/lib/libweirstream.so
	install -m 644 crates/weir-capi/include/weir_stream.h crates/weir-capi/include/weir_forward.h \
		crates/weir-capi/include/weir_packet.h $(DESTDIR)$(PREFIX)/include/
	for pc in weirstream weirpacket; do \
		sed -e 's|@PREFIX@|$(PREFIX)|' -e 's|@VERSION@|$(VERSION)|' dist/$$pc.pc.in > $(DESTDIR)$(PREFIX)/lib/pkgconfig/$$pc.pc; \
	done
	$(TARGET_DIR)/release/weir man $(DESTDIR)$(PREFIX)/share/man/man1

# make install into a scratch prefix, then use what it installed: the man
# page, weir run finding its libpcap there, and the C examples built with
# pkg-config against the installed headers and library, run on a trace.
install-check:
	scripts/install-check

bench: build
	$(CARGO) build --release -p weir --example filter_cost
	python3 bench/run.py

clean:
	$(CARGO) clean
	rm -rf docs/book
