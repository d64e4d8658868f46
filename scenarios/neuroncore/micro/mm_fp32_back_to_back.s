# The same 64 MultiplyMoving instructions with fp32 operands: [ISA] x4 the bf16 cost.
tensor: load_stationary sb.fp32[0:128]@0{128} | control: set_reg r0 value=64
loop:
tensor: multiply_moving ps.fp32[0:128]@0{512}, sb.fp32[0:128]@512{512} start stop | control: dec_branch_nz r0 loop
control: halt
