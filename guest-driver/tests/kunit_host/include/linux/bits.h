/* SPDX-License-Identifier: GPL-2.0 */
#define BIT_ULL(n) (1ULL << (n))
