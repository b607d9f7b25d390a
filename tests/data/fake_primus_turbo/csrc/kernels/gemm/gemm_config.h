/* The fixture kernel's cost: how many times it sweeps the output.  The rebuild tests'
 * patches change this number (4: 33% slower, 2: 33% faster). */
#define PT_FIXTURE_SWEEPS 3
