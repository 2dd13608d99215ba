from krung.host.cli import main

main()
