//! The classic BPF JIT: decoded programs compiled to x86-64 machine code.
//!
//! Contract: for every program [`super::program::decode`] accepts and every
//! packet, the code [`Jit::compile`] makes returns exactly what
//! [`super::interp::run`] returns, the reference it is tested against
//! (`filter/tests.rs`, the corpus test and the `jit` fuzz target). That
//! includes the interpreter's choices where libpcap is undefined or does not
//! end: scratch memory starts zeroed, and backward jumps ([`Op::Loop`]) share
//! one budget of the captured length plus one, past which the packet is
//! rejected. Out-of-bounds loads and division or modulo by an X of zero return
//! 0. The JIT only ever sees [`Op`]s, which only `decode` makes, so a program
//! that failed validation cannot reach it.
//!
//! The code lives in its own anonymous mapping: written while it is read+write,
//! then turned read+execute with `mprotect` before anything runs it (never
//! writable and executable at once), and unmapped when the last [`Filter`]
//! clone holding it is dropped. If the mapping or the change of protection
//! fails, [`Jit::compile`] says why and the filter runs on the interpreter.
//!
//! Why iced-x86's `code_asm`: it is a maintained, pure-Rust x86 encoder whose
//! typed assembler (one method per mnemonic, operands checked by the type
//! system) needs no build script or procedural macro, and whose block encoder
//! sizes every branch (short or near) and resolves labels by itself, which is
//! the fiddly part of a JIT for BPF's two-way jumps. dynasm-rs needs its own
//! macro dialect, and Cranelift is an optimising compiler far larger than
//! a one-pass translation of straight-line, register-only code needs.
//!
//! The generated function is `extern "sysv64" fn(data, caplen, wire_len) -> u32`.
//! Registers: A in `eax`, X in `ecx` (so shifts by X use `cl` directly), the
//! packet in `rdi`/`rsi`, the wire length moved to `r8d` (division needs
//! `edx`), the backward-jump budget in `r9`, temporaries in `edx`, `r10`,
//! `r11` and `xmm0` to `xmm2`. The constants of equality runs (see
//! [`equality_run`]) follow the code in the same mapping, read RIP-relative,
//! so the code is position-independent. Scratch memory is the 64 bytes below
//! the stack pointer, in the System V red zone that a leaf function may use
//! without moving `rsp` (signal handlers on Linux skip it). Nothing is saved
//! or restored: every register the code touches is caller-saved.
//!
//! Beside it in the mapping, a batch function runs the same program on many
//! packets in one call (`extern "sysv64" fn(inputs, n, out)`, see
//! [`assemble`]): a call, the loads of its arguments and a return are most
//! of what a program of a few instructions costs, and a batch pays them once.
//! It saves and restores the three callee-saved registers its loop keeps.

#![allow(unsafe_code)]

use std::ffi::c_void;
use std::fmt;
use std::io;
use std::ptr::NonNull;
use std::sync::Arc;

use iced_x86::code_asm::{
    ax, byte_ptr, cl, cx, dword_ptr, eax, ecx, edx, qword_ptr, r10, r10d, r11, r12, r13, r8d, r9, rbx, rdi, rdx, rsi, rsp, word_ptr, xmm0,
    xmm1, xmm2, xmmword_ptr, AsmMemoryOperand, AsmRegister16, AsmRegister32, CodeAssembler, CodeLabel, IcedError,
};
use iced_x86::BlockEncoderOptions;

use super::program::{Op, Slot, Target, MEMWORDS};
use super::BatchInput;

/// The compiled program's signature; `caplen` is the length of `data`.
type Entry = unsafe extern "sysv64" fn(data: *const u8, caplen: usize, wire_len: u32) -> u32;

/// The batch function's signature: `out[i]` gets the verdict on `inputs[i]`, for `i < n`.
type BatchEntry = unsafe extern "sysv64" fn(inputs: *const BatchInput<'_>, n: usize, out: *mut u32);

/// Scratch memory's offset from `rsp`: all of it inside the 128-byte red zone.
const SCRATCH: i32 = -((MEMWORDS * 4) as i32);

/// A program compiled to machine code, in a read+execute mapping of its own.
/// Clones share the mapping; the entry point is kept beside it, so a run
/// reads no more than the filter itself to find the code.
#[derive(Clone)]
pub(super) struct Jit {
    entry: Entry,
    batch: BatchEntry,
    code: Arc<Mapping>,
}

/// The mapping that holds the code, unmapped when the last [`Jit`] goes.
struct Mapping {
    map: NonNull<c_void>,
    map_len: usize,
    code_len: usize,
}

// SAFETY: the mapping is written only in `map_executable`, before the
// `Mapping` exists, and is read+execute from then on, so every thread sees the
// same immutable bytes; the generated code keeps its state in registers and
// the calling thread's stack, so any number of threads may run it at once.
// Unmapping happens once, in `drop`, when no `Jit` refers to it any more.
unsafe impl Send for Mapping {}
// SAFETY: as for Send: nothing reachable through `&Mapping` is ever mutated.
unsafe impl Sync for Mapping {}

impl fmt::Debug for Jit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Jit").field("code_bytes", &self.code.code_len).finish_non_exhaustive()
    }
}

#[cfg(test)]
thread_local! {
    /// How many programs this thread compiled, so a test can show that a
    /// refused program never got here.
    pub(super) static COMPILED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Jit {
    /// Compile decoded `ops` (as `decode` returned them) and map the code.
    ///
    /// # Errors
    ///
    /// Why there is no JIT for this program: the encoder's message (which a
    /// valid program should never cause), or the OS error of `mmap` or
    /// `mprotect`.
    pub(super) fn compile(ops: &[Op]) -> Result<Jit, String> {
        #[cfg(test)]
        COMPILED.with(|c| c.set(c.get() + 1));
        let (code, batch_at) = assemble(ops).map_err(|e| format!("the x86-64 encoder refused the program: {e}"))?;
        map_executable(&code, batch_at).map_err(|e| format!("could not map the compiled filter as executable: {e}"))
    }

    /// Run on one packet: the interpreter's answer, 0 to reject or the snap length.
    #[inline]
    pub(super) fn run(&self, data: &[u8], wire_len: u32) -> u32 {
        // SAFETY: `entry` points at code made by `assemble` for a validated
        // program, mapped read+execute while `self.code` lives. That code reads only
        // `data[..data.len()]` (every packet load is bounds-checked against
        // `caplen` first), the 64 bytes of red zone below the stack pointer,
        // and registers the System V ABI lets a callee clobber; it always
        // returns, because forward jumps end at a return and backward ones
        // spend a finite budget.
        unsafe { (self.entry)(data.as_ptr(), data.len(), wire_len) }
    }

    /// Run on each of `inputs`, its verdict into the same place of `out`
    /// (which is at least as long), in one call.
    #[inline]
    pub(super) fn run_batch(&self, inputs: &[BatchInput<'_>], out: &mut [u32]) {
        debug_assert!(out.len() >= inputs.len());
        let n = inputs.len().min(out.len());
        // SAFETY: as in `run`, for each input: a `BatchInput` holds the
        // pointer and length of a live `&[u8]` (its lifetime says so), and the
        // batch function reads exactly the `n` inputs and writes exactly the
        // `n` verdicts it is given, both of which the slices hold. Its
        // callee-saved registers are restored before it returns.
        unsafe { (self.batch)(inputs.as_ptr(), n, out.as_mut_ptr()) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: `map` and `map_len` are what mmap returned in `map_executable`;
        // no caller can be running the code, since that takes a `&Jit`, and
        // every `Jit` holds this mapping.
        unsafe { libc::munmap(self.map.as_ptr(), self.map_len) };
    }
}

/// Copy `code` into a fresh anonymous mapping, then make it read+execute;
/// the batch function starts `batch_at` bytes in.
fn map_executable(code: &[u8], batch_at: usize) -> io::Result<Jit> {
    if batch_at >= code.len() {
        return Err(io::Error::other("the batch function lies outside the code"));
    }
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
    let map_len = code.len().div_ceil(page).max(1) * page;
    // SAFETY: an anonymous private mapping at an address the kernel picks
    // touches no existing memory.
    let map = unsafe {
        libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)
    };
    if map == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    let Some(map) = NonNull::new(map) else { return Err(io::Error::other("mmap returned a null mapping")) };
    // SAFETY: the mapping is `map_len >= code.len()` bytes, writable, and
    // ours alone. Past the code, int3 everywhere: a jump that went astray
    // would trap rather than run zeros.
    unsafe {
        let base = map.as_ptr().cast::<u8>();
        std::ptr::write_bytes(base, 0xcc, map_len);
        std::ptr::copy_nonoverlapping(code.as_ptr(), base, code.len());
    }
    // SAFETY: the range is the mapping made above.
    if unsafe { libc::mprotect(map.as_ptr(), map_len, libc::PROT_READ | libc::PROT_EXEC) } != 0 {
        let e = io::Error::last_os_error();
        // SAFETY: as in Drop; nothing refers to the mapping yet.
        unsafe { libc::munmap(map.as_ptr(), map_len) };
        return Err(e);
    }
    // SAFETY: the mapping now holds, from its first byte, a complete function
    // of the `Entry` ABI (see `assemble`), and is executable. x86 keeps its
    // instruction fetch coherent with earlier stores, so no cache flush is due.
    let entry = unsafe { std::mem::transmute::<*mut c_void, Entry>(map.as_ptr()) };
    // SAFETY: likewise, `batch_at` (inside the code, checked above) is where
    // `assemble` put the batch function, of the `BatchEntry` ABI.
    let batch = unsafe { std::mem::transmute::<*mut u8, BatchEntry>(map.as_ptr().cast::<u8>().add(batch_at)) };
    Ok(Jit { entry, batch, code: Arc::new(Mapping { map, map_len, code_len: code.len() }) })
}

/// Whether op `at` compiles to nothing, given `rep` filled in for every
/// instruction after it. Each op that is not elided emits at least one machine
/// instruction, so the assembler can hang that op's label on it.
fn elided(op: Op, at: usize, rep: &[usize]) -> bool {
    let next = rep.get(at + 1).copied();
    let to_next = |t: Target| Some(rep[usize::from(t)]) == next;
    match op {
        Op::Ja(t) => to_next(t),
        Op::JeqK { jt, jf, .. }
        | Op::JgtK { jt, jf, .. }
        | Op::JgeK { jt, jf, .. }
        | Op::JsetK { jt, jf, .. }
        | Op::JeqX { jt, jf }
        | Op::JgtX { jt, jf }
        | Op::JgeX { jt, jf }
        | Op::JsetX { jt, jf } => to_next(jt) && to_next(jf),
        // Constant shifts use the low five bits of the count, as the interpreter's wrapping shifts do.
        Op::LshK(k) | Op::RshK(k) => k % 32 == 0,
        Op::AddK(0) | Op::SubK(0) | Op::OrK(0) | Op::XorK(0) | Op::MulK(1) | Op::AndK(u32::MAX) => true,
        Op::DivK(k) => k.get() == 1,
        _ => false,
    }
}

/// Whether the program loads packet bytes.
fn reads_packet(ops: &[Op]) -> bool {
    ops.iter().any(|op| {
        matches!(op, Op::LdAbsW(_) | Op::LdAbsH(_) | Op::LdAbsB(_) | Op::LdIndW(_) | Op::LdIndH(_) | Op::LdIndB(_) | Op::LdxMsh(_))
    })
}

/// Whether the program reads the packet's wire length.
fn reads_len(ops: &[Op]) -> bool {
    ops.iter().any(|op| matches!(op, Op::LdLen | Op::LdxLen))
}

/// Whether `op` uses X's value.
fn reads_x(op: Op) -> bool {
    matches!(
        op,
        Op::LdIndW(_)
            | Op::LdIndH(_)
            | Op::LdIndB(_)
            | Op::Stx(_)
            | Op::AddX
            | Op::SubX
            | Op::MulX
            | Op::DivX
            | Op::ModX
            | Op::AndX
            | Op::OrX
            | Op::XorX
            | Op::LshX
            | Op::RshX
            | Op::JeqX { .. }
            | Op::JgtX { .. }
            | Op::JgeX { .. }
            | Op::JsetX { .. }
            | Op::Txa
    )
}

/// An instruction's part in a run of `jeq #k` that all jump to one place when
/// true and to the next of the run when false, the shape libpcap gives
/// `port 21 or port 22 or ...` and protocol lists.
#[derive(Copy, Clone, PartialEq, Eq, Debug)]
pub(super) enum Run {
    None,
    /// The first of a run of `len` instructions, which jumps to `jt` when A
    /// equals one of their constants, else to `jf` (the last one's).
    Head {
        len: usize,
        jt: Target,
        jf: Target,
    },
    /// A later one, emitted with its head.
    Member,
}

/// Runs shorter than this keep one branch per comparison.
const MIN_RUN: usize = 3;

/// Find the equality runs. Nothing jumps into a run after its first
/// instruction: each later one is the target of its predecessor's false
/// branch and of no other jump.
pub(super) fn equality_runs(ops: &[Op]) -> Vec<Run> {
    // How many jumps land on each instruction (a jt and a jf count apart).
    let mut refs = vec![0u32; ops.len()];
    for op in ops {
        match *op {
            Op::Ja(t) | Op::Loop(t) => refs[usize::from(t)] += 1,
            Op::JeqK { jt, jf, .. }
            | Op::JgtK { jt, jf, .. }
            | Op::JgeK { jt, jf, .. }
            | Op::JsetK { jt, jf, .. }
            | Op::JeqX { jt, jf }
            | Op::JgtX { jt, jf }
            | Op::JgeX { jt, jf }
            | Op::JsetX { jt, jf } => {
                refs[usize::from(jt)] += 1;
                refs[usize::from(jf)] += 1;
            }
            _ => {}
        }
    }
    let mut runs = vec![Run::None; ops.len()];
    let mut i = 0;
    while i < ops.len() {
        let Op::JeqK { jt: t, .. } = ops[i] else {
            i += 1;
            continue;
        };
        let mut end = i + 1;
        let mut last_jf = None;
        while let Op::JeqK { jf, .. } = ops[end - 1] {
            last_jf = Some(jf);
            match ops.get(end) {
                Some(&Op::JeqK { jt, .. }) if jt == t && usize::from(jf) == end && refs[end] == 1 => end += 1,
                _ => break,
            }
        }
        if let Some(jf) = last_jf.filter(|_| end - i >= MIN_RUN) {
            runs[i] = Run::Head { len: end - i, jt: t, jf };
            runs[i + 1..end].fill(Run::Member);
        }
        i = end;
    }
    runs
}

/// The constants of the equality runs, four to a 16-byte group, laid out
/// after the code and read RIP-relative.
type Tables = Vec<(CodeLabel, [u32; 4])>;

/// A run of `jeq #k_i, jt T, jf next` (the last: jf F) as one test: compare
/// A with all the constants at once, four to an SSE2 compare, then branch
/// once. Each branch on a packet's port or protocol is a fresh guess for the
/// CPU, so a chain of them mispredicts several times per packet; the run
/// mispredicts at most once, and costs a few instructions per four constants
/// where the chain costs two per constant. `next` is the first instruction
/// after the run that emits code.
fn equality_run(
    a: &mut CodeAssembler,
    run: &[Op],
    targets: (Target, Target),
    (labels, rep, next): (&[CodeLabel], &[usize], Option<usize>),
    tables: &mut Tables,
) -> Result<(), IcedError> {
    let ks: Vec<u32> = run.iter().filter_map(|op| if let Op::JeqK { k, .. } = *op { Some(k) } else { None }).collect();
    // A in all four lanes of xmm0.
    a.movd(xmm0, eax)?;
    a.pshufd(xmm0, xmm0, 0)?;
    for (i, group) in ks.chunks(4).enumerate() {
        // A short last group repeats its last constant: a lane equal to it says nothing new.
        let mut lanes = [*group.last().unwrap_or(&0); 4];
        lanes[..group.len()].copy_from_slice(group);
        let label = a.create_label();
        tables.push((label, lanes));
        if i == 0 {
            a.movdqu(xmm1, xmmword_ptr(label))?;
            a.pcmpeqd(xmm1, xmm0)?;
        } else {
            a.movdqu(xmm2, xmmword_ptr(label))?;
            a.pcmpeqd(xmm2, xmm0)?;
            a.por(xmm1, xmm2)?;
        }
    }
    a.pmovmskb(edx, xmm1)?;
    a.test(edx, edx)?;
    branch(a, Cond::NonZero, targets, labels, rep, next)
}

/// A condition of a BPF jump, tested on the flags a `cmp` or `test` leaves.
#[derive(Copy, Clone)]
enum Cond {
    Eq,
    Above,
    AboveEq,
    NonZero,
}

/// How a program's return leaves the code: the one-packet function returns
/// to its caller; the batch function stores the verdict and goes on with the
/// next packet (see [`assemble`]).
#[derive(Copy, Clone)]
enum Exit {
    Ret,
    Next { next: CodeLabel, done: CodeLabel },
}

impl Exit {
    /// Leave with the verdict in `eax`. The batch's store and step to the
    /// next packet are written out at every exit rather than jumped to: a
    /// taken jump fewer per packet, where a short program takes only two or
    /// three (the machine runs at most one or two a cycle).
    fn leave(self, a: &mut CodeAssembler) -> Result<(), IcedError> {
        match self {
            Exit::Ret => a.ret(),
            Exit::Next { next, done } => {
                a.mov(dword_ptr(r13), eax)?;
                a.add(rbx, INPUT_SIZE)?;
                a.add(r13, 4)?;
                a.sub(r12, 1)?;
                a.jne(next)?;
                a.jmp(done)
            }
        }
    }
}

/// How many packets ahead of the one it judges the batch loop prefetches.
const PREFETCH: i32 = 8;

/// The size of one [`BatchInput`](super::BatchInput) in bytes, as the batch loop steps through them.
const INPUT_SIZE: i32 = std::mem::size_of::<super::BatchInput<'static>>() as i32;

/// The generated code for `ops`, position-independent (branches and table
/// reads are relative): the one-packet function at offset 0, then the batch
/// function, whose offset is returned beside the code.
///
/// The batch function, `extern "sysv64" fn(inputs, n, out)`, runs the same
/// body on each of `n` [`BatchInput`](super::BatchInput)s in turn and stores
/// each verdict in `out[i]`: the call and the return are paid once per
/// batch, not per packet, which is most of what a short program costs. It
/// keeps its place in `rbx` (the input), `r12` (packets left) and `r13` (the
/// verdict), callee-saved, so pushed and popped around the loop; the body is
/// the one-packet function's with every return turned into the store and the
/// step to the next packet (see [`Exit`]), and its scratch memory is still
/// the red zone below `rsp`, since the loop calls nothing.
fn assemble(ops: &[Op]) -> Result<(Vec<u8>, usize), IcedError> {
    let mut a = CodeAssembler::new(64)?;
    let mut tables = Tables::new();
    body(&mut a, ops, Exit::Ret, &mut tables)?;

    let mut batch = a.create_label();
    let mut next = a.create_label();
    let mut done = a.create_label();
    a.set_label(&mut batch)?;
    a.push(rbx)?;
    a.push(r12)?;
    a.push(r13)?;
    a.mov(rbx, rdi)?;
    a.mov(r12, rsi)?;
    a.mov(r13, rdx)?;
    a.test(r12, r12)?;
    a.je(done)?;
    a.set_label(&mut next)?;
    // Ask for the first line of the packet PREFETCH inputs ahead, if the batch
    // has one and the program reads packets at all: a mispredicted verdict
    // discards the loads issued after it, and a prefetch issued before it
    // still brings its line in.
    if reads_packet(ops) {
        let mut fetched = a.create_label();
        a.cmp(r12, PREFETCH)?;
        a.jbe(fetched)?;
        a.mov(r10, qword_ptr(rbx + PREFETCH * INPUT_SIZE))?;
        a.prefetcht0(byte_ptr(r10))?;
        a.set_label(&mut fetched)?;
    }
    // The one-packet function's arguments, from the input's fields; the wire
    // length only for a program that reads it.
    a.mov(rdi, qword_ptr(rbx))?;
    a.mov(rsi, qword_ptr(rbx + 8))?;
    if reads_len(ops) {
        a.mov(edx, dword_ptr(rbx + 16))?;
    }
    body(&mut a, ops, Exit::Next { next, done }, &mut tables)?;
    a.set_label(&mut done)?;
    a.pop(r13)?;
    a.pop(r12)?;
    a.pop(rbx)?;
    a.ret()?;

    for (mut label, lanes) in tables {
        a.set_label(&mut label)?;
        a.dd(&lanes)?;
    }
    let result = a.assemble_options(0, BlockEncoderOptions::RETURN_NEW_INSTRUCTION_OFFSETS)?;
    // An offset into code of at most a few hundred KiB: it fits any usize.
    let at = result.label_ip(&batch)? as usize;
    Ok((result.inner.code_buffer, at))
}

/// The code of one run of `ops` on the packet in `rdi`/`rsi` (wire length in
/// `edx`), leaving by `exit` with the verdict in `eax`. Its labels are its own,
/// so the body can be emitted more than once in a mapping.
fn body(a: &mut CodeAssembler, ops: &[Op], exit: Exit, tables: &mut Tables) -> Result<(), IcedError> {
    let n = ops.len();
    let runs = equality_runs(ops);
    // rep[i]: the first instruction at or after i that emits code; a jump to i
    // lands there. The last op is a return, which is never elided, and the
    // members of an equality run after its first are emitted with the first.
    let mut rep = vec![0usize; n];
    for i in (0..n).rev() {
        rep[i] = match runs[i] {
            Run::Member => rep[i + 1],
            // A head stands for the whole run, whose false branch is the last one's.
            Run::Head { .. } => i,
            Run::None if elided(ops[i], i, &rep) => rep[i + 1],
            Run::None => i,
        };
    }
    let mut labels: Vec<CodeLabel> = (0..n).map(|_| a.create_label()).collect();
    let target = |labels: &[CodeLabel], t: Target| labels[rep[usize::from(t)]];
    let mut reject = a.create_label();

    // Prologue: A and X start at 0, like the interpreter's, where that can be
    // seen: A unless the first instruction sets it (or returns a constant),
    // X unless no instruction reads it.
    if !matches!(ops[0], Op::LdAbsW(_) | Op::LdAbsH(_) | Op::LdAbsB(_) | Op::LdLen | Op::LdImm(_) | Op::LdMem(_) | Op::RetK(_)) {
        a.xor(eax, eax)?;
    }
    if ops.iter().any(|op| reads_x(*op)) {
        a.xor(ecx, ecx)?;
    }
    if reads_len(ops) {
        a.mov(r8d, edx)?;
    }
    if ops.iter().any(|op| matches!(op, Op::Loop(_))) {
        // The interpreter's budget: caplen + 1 backward jumps (a slice's length is
        // at most isize::MAX, so this cannot wrap).
        a.lea(r9, rsi + 1)?;
    }
    if ops.iter().any(|op| matches!(op, Op::LdMem(_) | Op::LdxMem(_))) {
        a.xorps(xmm0, xmm0)?;
        for i in 0..(MEMWORDS as i32 / 4) {
            a.movups(xmmword_ptr(rsp + (SCRATCH + 16 * i)), xmm0)?;
        }
    }

    for (i, &op) in ops.iter().enumerate() {
        if rep[i] != i {
            continue;
        }
        a.set_label(&mut labels[i])?;
        if let Run::Head { len, jt, jf } = runs[i] {
            equality_run(a, &ops[i..i + len], (jt, jf), (&labels, &rep, rep.get(i + len).copied()), tables)?;
            continue;
        }
        let fallthrough = rep.get(i + 1).copied();
        match op {
            Op::LdAbsW(k) => load_abs(a, eax, Size::Word, k, reject)?,
            Op::LdAbsH(k) => load_abs(a, eax, Size::Half, k, reject)?,
            Op::LdAbsB(k) => load_abs(a, eax, Size::Byte, k, reject)?,
            Op::LdIndW(k) => load_ind(a, Size::Word, k, reject)?,
            Op::LdIndH(k) => load_ind(a, Size::Half, k, reject)?,
            Op::LdIndB(k) => load_ind(a, Size::Byte, k, reject)?,
            Op::LdLen => a.mov(eax, r8d)?,
            Op::LdImm(k) => set(a, eax, k)?,
            Op::LdMem(s) => a.mov(eax, scratch(s))?,
            Op::LdxImm(k) => set(a, ecx, k)?,
            Op::LdxMem(s) => a.mov(ecx, scratch(s))?,
            Op::LdxLen => a.mov(ecx, r8d)?,
            Op::LdxMsh(k) => {
                load_abs(a, ecx, Size::Byte, k, reject)?;
                a.and(ecx, 0xf)?;
                a.shl(ecx, 2)?;
            }
            Op::St(s) => a.mov(scratch(s), eax)?,
            Op::Stx(s) => a.mov(scratch(s), ecx)?,
            Op::AddK(k) => a.add(eax, k)?,
            Op::SubK(k) => a.sub(eax, k)?,
            Op::MulK(k) => a.imul_3(eax, eax, k)?,
            Op::DivK(k) if k.is_power_of_two() => a.shr(eax, k.trailing_zeros())?,
            Op::DivK(k) => {
                a.xor(edx, edx)?;
                a.mov(r10d, k.get())?;
                a.div(r10d)?;
            }
            Op::ModK(k) if k.is_power_of_two() => a.and(eax, k.get() - 1)?,
            Op::ModK(k) => {
                a.xor(edx, edx)?;
                a.mov(r10d, k.get())?;
                a.div(r10d)?;
                a.mov(eax, edx)?;
            }
            Op::AndK(k) => a.and(eax, k)?,
            Op::OrK(k) => a.or(eax, k)?,
            Op::XorK(k) => a.xor(eax, k)?,
            Op::LshK(k) => a.shl(eax, k % 32)?,
            Op::RshK(k) => a.shr(eax, k % 32)?,
            Op::AddX => a.add(eax, ecx)?,
            Op::SubX => a.sub(eax, ecx)?,
            Op::MulX => a.imul_2(eax, ecx)?,
            Op::DivX | Op::ModX => {
                a.test(ecx, ecx)?;
                a.je(reject)?;
                a.xor(edx, edx)?;
                a.div(ecx)?;
                if op == Op::ModX {
                    a.mov(eax, edx)?;
                }
            }
            Op::AndX => a.and(eax, ecx)?,
            Op::OrX => a.or(eax, ecx)?,
            Op::XorX => a.xor(eax, ecx)?,
            // The machine shift uses the low five bits of cl; the interpreter
            // gives 0 for a count of 32 or more, so that case overrides it.
            Op::LshX | Op::RshX => {
                a.xor(r10d, r10d)?;
                if op == Op::LshX {
                    a.shl(eax, cl)?;
                } else {
                    a.shr(eax, cl)?;
                }
                a.cmp(ecx, 32)?;
                a.cmovae(eax, r10d)?;
            }
            Op::Neg => a.neg(eax)?,
            Op::Ja(t) => a.jmp(target(&labels, t))?,
            Op::Loop(t) => {
                // The interpreter's check, then decrement: a budget of 0 rejects.
                a.sub(r9, 1)?;
                a.jb(reject)?;
                a.jmp(target(&labels, t))?;
            }
            Op::JeqK { k, jt, jf } => {
                a.cmp(eax, k)?;
                branch(a, Cond::Eq, (jt, jf), &labels, &rep, fallthrough)?;
            }
            Op::JgtK { k, jt, jf } => {
                a.cmp(eax, k)?;
                branch(a, Cond::Above, (jt, jf), &labels, &rep, fallthrough)?;
            }
            Op::JgeK { k, jt, jf } => {
                a.cmp(eax, k)?;
                branch(a, Cond::AboveEq, (jt, jf), &labels, &rep, fallthrough)?;
            }
            Op::JsetK { k, jt, jf } => {
                a.test(eax, k)?;
                branch(a, Cond::NonZero, (jt, jf), &labels, &rep, fallthrough)?;
            }
            Op::JeqX { jt, jf } => {
                a.cmp(eax, ecx)?;
                branch(a, Cond::Eq, (jt, jf), &labels, &rep, fallthrough)?;
            }
            Op::JgtX { jt, jf } => {
                a.cmp(eax, ecx)?;
                branch(a, Cond::Above, (jt, jf), &labels, &rep, fallthrough)?;
            }
            Op::JgeX { jt, jf } => {
                a.cmp(eax, ecx)?;
                branch(a, Cond::AboveEq, (jt, jf), &labels, &rep, fallthrough)?;
            }
            Op::JsetX { jt, jf } => {
                a.test(eax, ecx)?;
                branch(a, Cond::NonZero, (jt, jf), &labels, &rep, fallthrough)?;
            }
            Op::RetK(k) => {
                set(a, eax, k)?;
                exit.leave(a)?;
            }
            Op::RetA => exit.leave(a)?,
            Op::Tax => a.mov(ecx, eax)?,
            Op::Txa => a.mov(eax, ecx)?,
        }
    }
    a.set_label(&mut reject)?;
    a.xor(eax, eax)?;
    exit.leave(a)
}

/// `reg = k`, with the shorter `xor` for 0.
fn set(a: &mut CodeAssembler, reg: AsmRegister32, k: u32) -> Result<(), IcedError> {
    if k == 0 {
        a.xor(reg, reg)
    } else {
        a.mov(reg, k)
    }
}

fn scratch(s: Slot) -> AsmMemoryOperand {
    dword_ptr(rsp + (SCRATCH + 4 * s.index() as i32))
}

/// The jumps after a `cmp`/`test`: to `jt` if `cond` holds, else to `jf`,
/// falling through where a target is `next`, the next instruction that emits code.
fn branch(
    a: &mut CodeAssembler,
    cond: Cond,
    (jt, jf): (Target, Target),
    labels: &[CodeLabel],
    rep: &[usize],
    next: Option<usize>,
) -> Result<(), IcedError> {
    let (jt, jf) = (rep[usize::from(jt)], rep[usize::from(jf)]);
    if jt == jf {
        return a.jmp(labels[jt]);
    }
    if Some(jt) == next {
        return jump_if(a, cond, false, labels[jf]);
    }
    jump_if(a, cond, true, labels[jt])?;
    if Some(jf) != next {
        a.jmp(labels[jf])?;
    }
    Ok(())
}

/// A conditional jump to `to` when `cond` is `holds`.
fn jump_if(a: &mut CodeAssembler, cond: Cond, holds: bool, to: CodeLabel) -> Result<(), IcedError> {
    match (cond, holds) {
        (Cond::Eq, true) => a.je(to),
        (Cond::Eq, false) => a.jne(to),
        (Cond::Above, true) => a.ja(to),
        (Cond::Above, false) => a.jbe(to),
        (Cond::AboveEq, true) => a.jae(to),
        (Cond::AboveEq, false) => a.jb(to),
        (Cond::NonZero, true) => a.jne(to),
        (Cond::NonZero, false) => a.je(to),
    }
}

/// The width of a packet load.
#[derive(Copy, Clone)]
enum Size {
    Word,
    Half,
    Byte,
}

impl Size {
    fn bytes(self) -> u32 {
        match self {
            Size::Word => 4,
            Size::Half => 2,
            Size::Byte => 1,
        }
    }
}

/// Load `size` bytes at `at` into `reg`, big-endian, zero-extended.
fn load(a: &mut CodeAssembler, reg: AsmRegister32, size: Size, at: AsmMemoryOperand) -> Result<(), IcedError> {
    match size {
        Size::Word => {
            a.mov(reg, dword_ptr(at))?;
            a.bswap(reg)
        }
        Size::Half => {
            // The 16-bit rotate swaps the two bytes; movzx already cleared the upper half.
            a.movzx(reg, word_ptr(at))?;
            a.rol(half_of(reg), 8)
        }
        Size::Byte => a.movzx(reg, byte_ptr(at)),
    }
}

/// The low 16 bits of A or X.
fn half_of(reg: AsmRegister32) -> AsmRegister16 {
    if reg == eax {
        ax
    } else {
        cx
    }
}

/// `reg = packet[k..k + size]`, or reject the packet when that is not all captured.
fn load_abs(a: &mut CodeAssembler, reg: AsmRegister32, size: Size, k: u32, reject: CodeLabel) -> Result<(), IcedError> {
    // In 64 bits the end cannot wrap, as in the interpreter's usize arithmetic.
    let end = u64::from(k) + u64::from(size.bytes());
    match i32::try_from(end) {
        Ok(end) => {
            a.cmp(rsi, end)?;
            a.jb(reject)?;
            // end fits an i32, so k does too.
            load(a, reg, size, rdi + k as i32)
        }
        Err(_) => {
            // Far offsets (Linux ancillary data among them) need the long forms.
            a.mov(r10, end)?;
            a.cmp(rsi, r10)?;
            a.jb(reject)?;
            a.mov(r10d, k)?;
            load(a, reg, size, rdi + r10)
        }
    }
}

/// `A = packet[X + k..X + k + size]`, or reject the packet when X + k
/// overflows 32 bits (libpcap's check) or the bytes are not all captured.
fn load_ind(a: &mut CodeAssembler, size: Size, k: u32, reject: CodeLabel) -> Result<(), IcedError> {
    // Writing r10d clears the upper half of r10: the offset is zero-extended.
    a.mov(r10d, ecx)?;
    if k != 0 {
        a.add(r10d, k)?;
        a.jb(reject)?;
    }
    a.lea(r11, r10 + size.bytes() as i32)?;
    a.cmp(r11, rsi)?;
    a.ja(reject)?;
    load(a, eax, size, rdi + r10)
}
