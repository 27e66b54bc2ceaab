// Run-time choice of the kernel instruction set for ds4::quant.
#pragma once

namespace ds4::quant {

/// Kernel instruction sets. Avx2 needs AVX2 + FMA + F16C; Avx512 needs AVX-512
/// F/BW/VL/DQ/VNNI (plus everything Avx2 needs).
enum class Isa { Scalar = 0, Avx2 = 1, Avx512 = 2 };

/// "scalar", "avx2" or "avx512".
const char* isa_name(Isa isa);

/// Whether this CPU and OS can run the kernels of `isa` (checked with __builtin_cpu_supports).
bool isa_supported(Isa isa);

/// The fastest ISA this machine supports.
Isa best_isa();

/// The ISA the dispatching functions of quant.h use. On first use it is taken from the
/// environment variable DS4_ISA ("scalar", "avx2" or "avx512") when set and non-empty, else
/// best_isa(). Throws ds4::Error if DS4_ISA holds another value or names an ISA this machine
/// lacks (the error repeats on every call until set_isa is called).
Isa active_isa();

/// Makes `isa` the active ISA for all threads (tests use it to compare kernels). Throws
/// ds4::Error if the machine cannot run it.
void set_isa(Isa isa);

/// Parses a DS4_ISA value; returns false for an unknown name.
bool parse_isa(const char* name, Isa* out);

}  // namespace ds4::quant
