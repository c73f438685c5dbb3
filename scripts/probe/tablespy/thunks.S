/*
 * thunks.S - the logging trampolines tablespy puts in the slots of the
 * export-table copies it hands out (x86-64, System V ABI).
 *
 * tablespy_thunks is a pool of TABLESPY_NTHUNKS 16-byte entries; entry i
 * loads i into %r11d and jumps to spy_common. spy_common:
 *   1. saves the six integer argument registers, %rax (the vector-register
 *      count of a variadic call) and %xmm0-7, and calls
 *      tablespy_enter(i, saved registers, return address), which records the
 *      call (arguments, the bytes they point to) on a per-thread stack and
 *      returns the original function;
 *   2. restores every argument register, drops the caller's return address
 *      (kept by tablespy_enter) and calls the original, so stack arguments
 *      lie exactly where the original expects them;
 *   3. saves %rax, %rdx, %xmm0 and %xmm1 (the return registers), calls
 *      tablespy_leave(%rax) (log, pop), which returns the caller's return
 *      address, restores them and jumps back to the caller as `ret` would.
 */
#define TABLESPY_NTHUNKS 4096

	.section .note.GNU-stack, "", @progbits
	.text

	.globl tablespy_thunks
	.hidden tablespy_thunks
	.type tablespy_thunks, @function
	.balign 16
tablespy_thunks:
	.set i, 0
	.rept TABLESPY_NTHUNKS
	.balign 16
	movl $i, %r11d
	jmp spy_common
	.set i, i + 1
	.endr
	.size tablespy_thunks, . - tablespy_thunks

	.type spy_common, @function
spy_common:
	/* entry: %rsp = 8 mod 16, (%rsp) = caller's return address */
	subq $200, %rsp /* 7 words + 8 xmm (128) + 8 pad: %rsp = 0 mod 16 */
	movq %rdi, 0(%rsp)
	movq %rsi, 8(%rsp)
	movq %rdx, 16(%rsp)
	movq %rcx, 24(%rsp)
	movq %r8, 32(%rsp)
	movq %r9, 40(%rsp)
	movq %rax, 48(%rsp)
	movdqu %xmm0, 64(%rsp)
	movdqu %xmm1, 80(%rsp)
	movdqu %xmm2, 96(%rsp)
	movdqu %xmm3, 112(%rsp)
	movdqu %xmm4, 128(%rsp)
	movdqu %xmm5, 144(%rsp)
	movdqu %xmm6, 160(%rsp)
	movdqu %xmm7, 176(%rsp)
	movl %r11d, %edi /* thunk index */
	movq %rsp, %rsi /* the six integer arguments */
	movq 200(%rsp), %rdx /* return address */
	call tablespy_enter
	movq %rax, %r11 /* the original */
	movq 0(%rsp), %rdi
	movq 8(%rsp), %rsi
	movq 16(%rsp), %rdx
	movq 24(%rsp), %rcx
	movq 32(%rsp), %r8
	movq 40(%rsp), %r9
	movq 48(%rsp), %rax
	movdqu 64(%rsp), %xmm0
	movdqu 80(%rsp), %xmm1
	movdqu 96(%rsp), %xmm2
	movdqu 112(%rsp), %xmm3
	movdqu 128(%rsp), %xmm4
	movdqu 144(%rsp), %xmm5
	movdqu 160(%rsp), %xmm6
	movdqu 176(%rsp), %xmm7
	addq $208, %rsp /* the frame and the return address: %rsp = 0 mod 16 */
	call *%r11
	subq $64, %rsp
	movq %rax, 0(%rsp)
	movq %rdx, 8(%rsp)
	movdqu %xmm0, 16(%rsp)
	movdqu %xmm1, 32(%rsp)
	movq %rax, %rdi
	call tablespy_leave
	movq %rax, %r11 /* the caller's return address */
	movq 0(%rsp), %rax
	movq 8(%rsp), %rdx
	movdqu 16(%rsp), %xmm0
	movdqu 32(%rsp), %xmm1
	addq $64, %rsp
	jmp *%r11
	.size spy_common, . - spy_common
