# A long counted loop for the SIGINT test (tests/cli/sigint.sh): 100k vector ops over 8 KiB per
# partition with numerics on, about 9 s of wall time in little memory, so that the run is still
# simulating when the signal arrives.
control: set_reg r0 value=100000
loop:
vector: tensor_scalar sb.fp32[0:128]@0{2048}, sb.fp32[0:128]@0{2048} op=add imm=1.0 | control: dec_branch_nz r0 loop
control: halt
