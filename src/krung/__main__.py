from krung.cli import main

main()
