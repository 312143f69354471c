// The header translation units are compiled into a library linked here; compiling them is
// the test. Linking catches definitions in headers that are not inline.
int main() { return 0; }
